package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseUIDRange(t *testing.T) {
	tests := []struct {
		in     string
		lo, hi uint32
		ok     bool
	}{
		{"100000-165535", 100000, 165535, true},
		{"5-5", 5, 5, true},
		{"0-10", 0, 0, false},
		{"10-5", 0, 0, false},
		{"100000", 0, 0, false},
		{"a-b", 0, 0, false},
		{"1-4294967295", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			lo, hi, err := ParseUIDRange(tt.in)
			if (err == nil) != tt.ok || lo != tt.lo || hi != tt.hi {
				t.Errorf("ParseUIDRange(%q) = %d, %d, %v", tt.in, lo, hi, err)
			}
		})
	}
}

func TestOpenNsjailGoesThroughTheDirectoryWhenTheJailMaySearchIt(t *testing.T) {
	private := t.TempDir() // 0700: the jail's uid cannot pass
	for _, tt := range []struct {
		name, dirMode string
		mode          os.FileMode
		want          string
	}{
		{"a searchable bin dir keeps the name", "bin", 0o755, "/proc/self/fd/6/nsjail"},
		{"a private bin dir: the binary itself", "secret", 0o700, "/proc/self/fd/6"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(private, tt.dirMode)
			if err := os.Mkdir(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(dir, "nsjail")
			if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(private, "link-"+tt.dirMode)
			if err := os.Symlink(bin, link); err != nil {
				t.Fatal(err)
			}
			f, path, err := openNsjail(link)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if path != tt.want {
				t.Errorf("exec path %q, want %q", path, tt.want)
			}
		})
	}
}
