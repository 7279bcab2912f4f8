//go:build !linux

package rootfs

import "context"

// denoCodeCache leaves DenoDir empty off Linux: filling it runs Deno
// chrooted into the tree in fresh namespaces (deno_cache_linux.go).
func (b *builder) denoCodeCache(context.Context) error {
	if b.deno != nil {
		b.denoCache = "none: the build did not run on Linux"
	}
	return nil
}
