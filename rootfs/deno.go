package rootfs

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/execgate/execgate/internal/hostbin"
	"github.com/execgate/execgate/jaillayout"
)

// Deno in the rootfs (at jaillayout.DenoPath, cache jaillayout.DenoDir): the binary from the pinned deno wheel (scripts/setup.sh
// installs it into the tools venv and links .tools/bin/deno), its shared
// library closure (glibc pieces only), and a read-only DENO_DIR holding
// V8's code cache of the harness (deno_cache_linux.go).
// Nothing is downloaded at build or run time. The binary gets the
// interpreter's mode: executable but unreadable by the tool's user, so a
// Deno process is non-dumpable like python3 (no /proc/<pid>/mem).

// hostDeno describes the Deno binary a rootfs is built with.
type hostDeno struct {
	Real    string
	Version string // from the wheel's dist-info next to the binary; "" if unknown
	Stamp   string
}

// findHostDeno returns the host Deno for opts: opts.DenoPath, or whatever
// hostbin.Find finds for hostbin.Deno. Without one the rootfs is built without Deno
// (JavaScript runs are then unavailable); a configured path that does not
// work is an error.
func findHostDeno(opts Options) (*hostDeno, error) {
	p, err := hostbin.Find(hostbin.Deno, opts.DenoPath)
	if err != nil {
		if opts.DenoPath != "" {
			return nil, err
		}
		return nil, nil
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, fmt.Errorf("resolving deno %s: %w", p, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("deno %s: %w", real, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("deno %s: not an executable file", real)
	}
	stamp, err := DenoStamp(real)
	if err != nil {
		return nil, err
	}
	return &hostDeno{Real: real, Version: denoWheelVersion(real), Stamp: stamp}, nil
}

// DenoStamp identifies a Deno binary by its content, not by where it is:
// its size and the GNU build id the linker computed from it (read from
// the ELF notes, without running it), or, for a binary without one, its
// size and SHA-256. Two checkouts with their own copy of the same Deno
// get the same stamp, so they share a rootfs instead of rebuilding it for
// each other; another build gets another stamp.
func DenoStamp(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("deno %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("deno %s: %w", path, err)
	}
	if id := gnuBuildID(f); id != "" {
		return fmt.Sprintf("size=%d build-id=%s", fi.Size(), id), nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing deno %s: %w", path, err)
	}
	return fmt.Sprintf("size=%d sha256=%x", fi.Size(), h.Sum(nil)), nil
}

// gnuBuildID is the hex of r's NT_GNU_BUILD_ID note, "" when r is not an
// ELF file or has none.
func gnuBuildID(r io.ReaderAt) string {
	ef, err := elf.NewFile(r)
	if err != nil {
		return ""
	}
	sec := ef.Section(".note.gnu.build-id")
	if sec == nil || sec.Size > 1024 {
		return ""
	}
	b, err := sec.Data()
	if err != nil || len(b) < 16 {
		return ""
	}
	bo := ef.ByteOrder
	namesz, descsz, typ := bo.Uint32(b[0:]), bo.Uint32(b[4:]), bo.Uint32(b[8:])
	const ntGNUBuildID = 3
	off := 12 + (uint64(namesz)+3)&^3
	if typ != ntGNUBuildID || namesz != 4 || string(b[12:15]) != "GNU" || descsz == 0 || off+uint64(descsz) > uint64(len(b)) {
		return ""
	}
	return hex.EncodeToString(b[off : off+uint64(descsz)])
}

// denoWheelVersion reads the version of the deno wheel that installed the
// binary at <venv>/bin/deno (<venv>/lib/python*/site-packages/deno-V.dist-info),
// without running it on the host.
func denoWheelVersion(real string) string {
	venv := filepath.Dir(filepath.Dir(real))
	matches, _ := filepath.Glob(filepath.Join(venv, "lib", "python*", "site-packages", "deno-*.dist-info"))
	for _, m := range matches {
		v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "deno-"), ".dist-info")
		if v != "" {
			return v
		}
	}
	return ""
}

// installDeno installs the binary, its libraries and the cache directory.
func (b *builder) installDeno(context.Context) error {
	if b.deno == nil {
		b.opts.progress("  no deno on this host: JavaScript and TypeScript tools unavailable (%s)", "scripts/setup.sh installs it")
		return nil
	}
	dir, err := b.mirrorDir(path.Dir(jaillayout.DenoPath), 0)
	if err != nil {
		return err
	}
	fi, err := os.Stat(b.deno.Real)
	if err != nil {
		return err
	}
	if err := copyFile(b.deno.Real, b.host(path.Join(dir, path.Base(jaillayout.DenoPath))), fi); err != nil {
		return err
	}
	if _, err := b.mirrorDir(jaillayout.DenoDir, 0); err != nil {
		return err
	}
	// Deno's libraries come from the tree's source (the host, or the
	// runtime's packages: one C library per tree).
	d, err := readELF(b.deno.Real, b.deno.Real)
	if err != nil {
		return err
	}
	r := newLibResolver(b.src)
	libs, err := r.closureOf([]string{b.deno.Real}, []*elfDeps{d})
	if err != nil {
		return fmt.Errorf("deno's shared libraries: %w", err)
	}
	for _, l := range libs {
		if err := b.installFile(l, 0); err != nil {
			return fmt.Errorf("installing %s: %w", l, err)
		}
	}
	b.opts.progress("  deno %s (%s), %d shared libraries", b.deno.Version, b.deno.Real, len(libs))
	return nil
}

// denoStale says why a rootfs must be rebuilt for the host's Deno ("" if
// it need not).
func denoStale(opts Options, m *Manifest) string {
	d, err := findHostDeno(opts)
	switch {
	case err != nil:
		return err.Error()
	case d == nil:
		return ""
	case m.DenoStamp != d.Stamp:
		return fmt.Sprintf("deno %s changed since the build", d.Real)
	case m.DenoCodeCache == "":
		return "built without Deno's code cache"
	}
	if _, err := os.Lstat(filepath.Join(opts.Dir, jaillayout.DenoPath)); err != nil {
		return "deno missing from the tree"
	}
	return ""
}
