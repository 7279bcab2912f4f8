package auth

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// EnsureDevKey creates the HS256 dev key file (0600, 32 random bytes hex) if
// it does not exist. It reports whether it created one.
func EnsureDevKey(path string) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("creating key dir: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("creating dev key: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(hex.EncodeToString(buf) + "\n"); err != nil {
		return false, err
	}
	return true, f.Close()
}
