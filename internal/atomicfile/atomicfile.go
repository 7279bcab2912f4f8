// Package atomicfile writes a file so that readers see the old file or the
// new, never a part: through a temporary file in the same directory and a
// rename.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path with mode through a temporary file in the same
// directory and a rename.
func Write(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
