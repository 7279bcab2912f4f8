package auth

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestEnsureDevKey_CreatesOnceWith0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dev.key")
	created, err := EnsureDevKey(path)
	if err != nil || !created {
		t.Fatalf("first call: created=%v err=%v", created, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	first, _ := os.ReadFile(path)
	created, err = EnsureDevKey(path)
	if err != nil || created {
		t.Fatalf("second call must keep the key: created=%v err=%v", created, err)
	}
	second, _ := os.ReadFile(path)
	if !bytes.Equal(first, second) {
		t.Error("key changed on second call")
	}
}
