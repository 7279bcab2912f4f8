package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// lockDir takes an exclusive lock on dir+".lock" (a file beside the rootfs),
// shared by every process building or ensuring the same rootfs. It waits
// until the lock is free or ctx ends.
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("creating rootfs parent: %w", err)
	}
	f, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening rootfs lock: %w", err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() {
				_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s.lock: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another build of %s: %w", dir, ctx.Err())
		case <-tick.C:
		}
	}
}

// swapInto puts the completed tree tmp at dir. An existing dir is exchanged
// atomically with tmp (renameat2 RENAME_EXCHANGE), so dir always holds a
// complete tree, and the old tree is then removed.
func swapInto(tmp, dir string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		if err := os.RemoveAll(tmp); err != nil {
			return fmt.Errorf("removing the previous rootfs (now at %s): %w", tmp, err)
		}
		return nil
	case errors.Is(err, unix.ENOENT):
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("moving rootfs into place: %w", err)
		}
		return nil
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		// Filesystems without RENAME_EXCHANGE: move the old tree aside first.
		old := tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("moving old rootfs aside: %w", err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			_ = os.Rename(old, dir)
			return fmt.Errorf("moving rootfs into place: %w", err)
		}
		return os.RemoveAll(old)
	default:
		return fmt.Errorf("swapping rootfs into place: %w", err)
	}
}

// syncTree flushes the filesystem holding the new tree before it is
// swapped in, so a crash cannot leave a manifest over half-written files.
func syncTree(root string) error {
	f, err := os.Open(root)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncing %s: %w", root, err)
	}
	return nil
}
