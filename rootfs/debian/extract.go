package debian

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// mergedUsr are the top-level directories that are links into /usr on a
// merged-/usr system (every Debian since 12). Extract puts what a package
// ships below them into /usr, so packages of either layout land in one
// tree, and MergedUsr creates the links.
var mergedUsr = []string{"bin", "sbin", "lib", "lib64", "lib32", "libx32"}

// MergedUsr makes root a merged-/usr tree: /bin, /sbin, /lib, /lib64 as
// relative links into usr/.
func MergedUsr(root string) error {
	for _, d := range mergedUsr[:4] {
		if err := os.MkdirAll(filepath.Join(root, "usr", d), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(path.Join("usr", d), filepath.Join(root, d)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// Extract unpacks the data of the .deb at deb into root (made by
// MergedUsr), as dpkg-deb -x would, with these differences: files under
// /bin, /sbin, /lib* go to /usr; only directories, regular files, symlinks
// and hard links are created (devices and fifos are skipped); no entry
// may leave root; modes keep only the permission bits, without setuid,
// setgid or sticky. Maintainer scripts never run. dpkg-deb (on PATH)
// decompresses the archive; this function writes the files.
func Extract(ctx context.Context, deb, root string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running dpkg-deb (apt-get install dpkg): %w", err)
	}
	xerr := untar(out, root)
	_, _ = io.Copy(io.Discard, out)
	werr := cmd.Wait()
	switch {
	case werr != nil:
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", filepath.Base(deb), werr, clip(strings.TrimSpace(stderr.String()), 400))
	case xerr != nil:
		return fmt.Errorf("unpacking %s: %w", filepath.Base(deb), xerr)
	}
	return nil
}

// canonical maps a member name to its merged-/usr path below root ("" for
// the root itself), or an error when it would leave root.
func canonical(name string) (string, error) {
	p := path.Clean("/" + strings.TrimPrefix(name, "./"))
	if p == "/" {
		return "", nil
	}
	if strings.Contains(name, "..") {
		for _, part := range strings.Split(name, "/") {
			if part == ".." {
				return "", fmt.Errorf("entry %q leaves the tree", clip(name, 200))
			}
		}
	}
	p = strings.TrimPrefix(p, "/")
	top, rest, _ := strings.Cut(p, "/")
	for _, d := range mergedUsr {
		if top == d {
			return path.Join("usr", d, rest), nil
		}
	}
	return p, nil
}

func untar(r io.Reader, root string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := canonical(h.Name)
		if err != nil {
			return err
		}
		if rel == "" {
			continue
		}
		dst := filepath.Join(root, filepath.FromSlash(rel))
		if err := parentsInside(root, rel); err != nil {
			return err
		}
		perm := os.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if fi, err := os.Lstat(dst); err == nil && (fi.IsDir() || fi.Mode()&os.ModeSymlink != 0) {
				continue
			}
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			_ = os.Remove(dst)
			f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Chmod(dst, perm); err != nil {
				return err
			}
			if err := os.Chtimes(dst, h.ModTime, h.ModTime); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			_ = os.Remove(dst)
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return err
			}
		case tar.TypeLink:
			target, err := canonical(h.Linkname)
			if err != nil {
				return err
			}
			if err := parentsInside(root, target); err != nil {
				return err
			}
			_ = os.Remove(dst)
			if err := os.Link(filepath.Join(root, filepath.FromSlash(target)), dst); err != nil {
				return err
			}
		default:
			// Devices, fifos: a runtime tree has none (the sandbox binds /dev).
		}
	}
}

// parentsInside refuses a path whose parent directories, as they exist
// in root now, include a symlink: writing through it could land outside
// root. The merged-/usr links are the exception (canonical never yields
// a path through them).
func parentsInside(root, rel string) error {
	dir := path.Dir(rel)
	cur := root
	for _, part := range strings.Split(dir, "/") {
		if part == "." || part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("entry %q: %s is a symlink in the tree", clip(rel, 200), part)
		}
	}
	return nil
}
