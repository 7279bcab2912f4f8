package toolconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSecretRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOKEN": "from-env", "BIG": strings.Repeat("x", 17)}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		ref     Secret
		max     int64
		want    string
		wantErr string
	}{
		{"a file's one trailing newline is trimmed", Secret{File: write("a", "s3cret\n")}, 64, "s3cret", ""},
		{"only one newline is trimmed", Secret{File: write("b", "line1\nline2\n\n")}, 64, "line1\nline2\n", ""},
		{"a value of exactly max bytes and its newline is read", Secret{File: write("c", "0123456789abcdef\n")}, 16, "0123456789abcdef", ""},
		{"a file over max is refused", Secret{File: write("d", "0123456789abcdefX")}, 16, "", "more than 16 bytes"},
		{"a missing file is an error", Secret{File: filepath.Join(dir, "nope")}, 64, "", "no such file"},
		{"an empty file is an error, never an empty secret", Secret{File: write("e", "\n")}, 64, "", "is empty"},
		{"a FIFO is refused without blocking", Secret{File: fifo}, 64, "", "not a regular file"},
		{"a directory is refused", Secret{File: dir}, 64, "", "not a regular file"},
		{"a variable is read", Secret{Env: "TOKEN"}, 64, "from-env", ""},
		{"an unset variable is an error", Secret{Env: "UNSET"}, 64, "", "UNSET is empty or unset"},
		{"a variable over max is refused", Secret{Env: "BIG"}, 16, "", "over the 16-byte bound"},
		{"a reference naming nothing is an error", Secret{}, 64, "", "neither a file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			var got string
			var err error
			go func() { got, err = tt.ref.Read(getenv, tt.max); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Read blocked")
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Read = %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				if got != "" {
					t.Fatalf("Read returned %q with its error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Read = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := (Secret{Env: "UNSET"}).Read(getenv, 0); !errors.Is(err, ErrSecretUnset) {
		t.Errorf("an unset variable's error does not match ErrSecretUnset: %v", err)
	}
}

func TestSecretReadPicksUpARotatedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	for _, v := range []string{"first-value", "second-value"} {
		// Rotated the way Kubernetes and most tools do: a new file renamed
		// over the old one.
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
		got, err := Secret{File: p}.Read(nil, 64)
		if err != nil || got != v {
			t.Fatalf("Read = %q, %v; want %q", got, err, v)
		}
	}
}
