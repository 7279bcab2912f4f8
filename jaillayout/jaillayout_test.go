package jaillayout

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeManifest(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, ManifestPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadManifest(t *testing.T) {
	tests := []struct {
		name    string
		dir     func(t *testing.T) string
		wantErr string
		noMan   bool
	}{
		{name: "a directory without a manifest is ErrNoManifest", dir: func(t *testing.T) string { return t.TempDir() }, noMan: true, wantErr: "no rootfs manifest"},
		{name: "a manifest that is not JSON is an error", dir: func(t *testing.T) string { return writeManifest(t, "{") }, wantErr: "decoding manifest"},
		{name: "a manifest of another format is an error", dir: func(t *testing.T) string { return writeManifest(t, `{"format": 2}`) }, wantErr: "format 2, want 1"},
		{name: "a manifest of this format is read", dir: func(t *testing.T) string {
			return writeManifest(t, `{"format": 1, "layout": 2, "protocol_version": 1, "python_version": "3.11.2"}`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ReadManifest(tt.dir(t))
			if tt.wantErr == "" {
				if err != nil || m.Layout != 2 || m.ProtocolVersion != 1 || m.PythonVersion != "3.11.2" {
					t.Fatalf("ReadManifest = %+v, %v", m, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.Is(err, ErrNoManifest) != tt.noMan {
				t.Fatalf("ReadManifest error = %v, want %q (ErrNoManifest: %v)", err, tt.wantErr, tt.noMan)
			}
		})
	}
}

func TestEveryMountPointIsAnAbsoluteJailPath(t *testing.T) {
	for _, p := range append(append([]string{}, MountPoints...), Devices...) {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			t.Errorf("%q is not a clean absolute path", p)
		}
	}
	if !strings.HasPrefix(EgressSocket, EgressDir+"/") {
		t.Errorf("EgressSocket %s is not in EgressDir %s", EgressSocket, EgressDir)
	}
}
