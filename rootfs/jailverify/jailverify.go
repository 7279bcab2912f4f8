// Package jailverify runs rootfs.Verify's in-jail probes through the real
// sandbox. It is the sandbox half of `execgate rootfs verify`, kept out of
// package rootfs so that building and checking a tree does not depend on
// the sandbox (the sandbox only reads the tree's layout, package
// jaillayout).
package jailverify

import (
	"context"
	"errors"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/sandbox"
)

// probeLimits bound every probe. Importing every extension module and
// walking the tree takes well under a second; the margins are for a loaded
// host.
var probeLimits = func() sandbox.Limits {
	l := limits.Default
	l.TimeoutMS, l.CPUMS, l.MemoryMB = 30000, 30000, 256
	return l
}()

// Opener returns a rootfs.OpenJail that starts a sandbox runner configured
// by cfg on the rootfs being verified (cfg.RootfsDir is replaced by it).
func Opener(cfg sandbox.Config) rootfs.OpenJail {
	return func(dir string) (rootfs.Jail, error) {
		cfg.RootfsDir = dir
		// Without the import check: the JavaScript probe imports node:fs
		// to prove that the jail's import map refuses it (the check would
		// refuse the probe before the jail).
		r, err := sandbox.NewRunner(cfg, sandbox.WithoutImportCheck())
		if err != nil {
			return nil, withHint(err)
		}
		return jail{r}, nil
	}
}

type jail struct{ r *sandbox.Runner }

var _ rootfs.Jail = jail{}

func (j jail) Close() error { return j.r.Close() }

func (j jail) Probe(ctx context.Context, p rootfs.Probe) (*rootfs.ProbeResult, error) {
	res, err := j.r.Run(ctx, sandbox.Spec{
		ExecutionID: p.ID,
		TenantID:    "execgate",
		Language:    p.Language,
		Source:      p.Source,
		Entrypoint:  "run",
		Network:     sandbox.NetworkNone,
		Limits:      probeLimits,
	})
	if err != nil {
		return nil, withHint(err)
	}
	out := &rootfs.ProbeResult{
		OK:      res.Status == sandbox.StatusOK,
		Result:  res.Result,
		Stderr:  res.Stderr,
		JailLog: res.NsjailLog,
		WallMS:  res.Usage.WallMS,
		CPUMS:   res.Usage.CPUMS,
	}
	if res.Error != nil {
		out.ErrorType, out.ErrorMessage, out.Traceback = res.Error.Type, res.Error.Message, res.Error.Traceback
	}
	return out, nil
}

// withHint carries the sandbox's hint for a jail that could not be created
// (the *sandbox.UnavailableError stays reachable with errors.As).
func withHint(err error) error {
	var ue *sandbox.UnavailableError
	if errors.As(err, &ue) {
		return &rootfs.JailError{Err: err, Hint: ue.Hint}
	}
	return err
}
