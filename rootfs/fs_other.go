//go:build !linux

package rootfs

import (
	"context"
	"errors"
)

// errUnsupported: the rootfs is for a Linux jail (nsjail).
var errUnsupported = errors.New("rootfs: only supported on Linux")

func lockDir(context.Context, string) (func(), error) { return nil, errUnsupported }
func swapInto(string, string) error                   { return errUnsupported }
func syncTree(string) error                           { return errUnsupported }
