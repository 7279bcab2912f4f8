package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/workspace"
)

// `execgate run --file PATH[=NAME] --out DIR` (issue #24): the input files
// of the run, read from the host within the run's limits.files and
// limits.files_bytes, and its artifacts written into a directory, safely:
// a name is a plain file name (the runner collected only such, and it is
// checked again here), nothing is followed, a symbolic link or anything
// but a regular file already at a name is left alone (an error), and a
// regular file is replaced whole (written beside it, then renamed over
// it), never written through.

// inputFiles reads the --file arguments (PATH, or PATH=NAME to place it at
// /workspace/NAME; without NAME at its base name) within l's files and
// files_bytes, naming the argument at fault.
func inputFiles(args []string, l sandbox.Limits) ([]sandbox.File, error) {
	if int64(len(args)) > l.Files {
		return nil, fmt.Errorf("--file: %d files; the run allows at most %d (limits.files)", len(args), l.Files)
	}
	files := make([]sandbox.File, 0, len(args))
	left := l.FilesBytes
	for _, arg := range args {
		host, name, named := strings.Cut(arg, "=")
		if !named {
			name = filepath.Base(host)
		}
		data, err := readBounded(host, left)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", arg, err)
		}
		left -= int64(len(data))
		files = append(files, sandbox.File{Path: name, Content: data})
	}
	if i, err := workspace.CheckFiles(files); err != nil {
		return nil, fmt.Errorf("--file %s: /workspace/%s: %w (give another name with PATH=NAME)", args[i], files[i].Path, err)
	}
	return files, nil
}

// readBounded reads the regular file at p if it holds at most left bytes
// (the files' budget still free): its size is checked before a byte is
// read, and no more than that is read whatever the file does meanwhile.
func readBounded(p string, left int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("is not a regular file (%s)", fi.Mode().Type())
	}
	over := func(n int64) error {
		return fmt.Errorf("is %d bytes; the files of a run may hold %d more (limits.files_bytes)", n, left)
	}
	if fi.Size() > left {
		return nil, over(fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, left+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > left {
		return nil, over(int64(len(data)))
	}
	return data, nil
}

// openOut makes --out's directory (and its parents) if missing and opens
// it; every artifact is written beneath that descriptor.
func openOut(dir string) (*os.Root, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	return root, nil
}

// writeArtifacts writes each artifact into root under its name and
// returns the names written. It goes on past an artifact it may not write
// and returns the errors of all of them.
func writeArtifacts(root *os.Root, arts []sandbox.Artifact) ([]string, error) {
	written := make([]string, 0, len(arts))
	var errs []error
	for _, a := range arts {
		if err := writeArtifact(root, a); err != nil {
			errs = append(errs, fmt.Errorf("artifact %q: %w", a.Name, err))
			continue
		}
		written = append(written, a.Name)
	}
	return written, errors.Join(errs...)
}

// writeArtifact writes a beside its name in root (a new file of a name
// nobody has, O_EXCL), then renames it over the name: what was there, if a
// regular file, is replaced whole; a symbolic link or anything else there
// is refused, and the rename would replace a link swapped in meanwhile,
// never write through it.
func writeArtifact(root *os.Root, a sandbox.Artifact) error {
	if err := workspace.CheckName(a.Name); err != nil {
		return fmt.Errorf("name %w", err)
	}
	if int64(len(a.Data)) != a.Bytes {
		return fmt.Errorf("holds %d bytes of %d", len(a.Data), a.Bytes)
	}
	if fi, err := root.Lstat(a.Name); err == nil && !fi.Mode().IsRegular() {
		what := "not a regular file"
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			what = "a symbolic link"
		case fi.IsDir():
			what = "a directory"
		}
		return fmt.Errorf("%s is there already, %s: left alone", filepath.Join(root.Name(), a.Name), what)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".execgate-" + hex.EncodeToString(rnd[:]) + ".tmp"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(a.Data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, a.Name)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}
