package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

func TestInputFilesNameTheFileAtFault(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil { // sparse: refused by its size, never read
			t.Fatal(err)
		}
		f.Close()
		return p
	}
	small, big := write("small.csv", 10), write("big.bin", limits.Default.FilesBytes+1)
	many := make([]string, limits.Default.Files+1)
	for i := range many {
		many[i] = small + "=f" + strings.Repeat("x", i)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"a missing file", []string{filepath.Join(dir, "nope.csv")}, "--file " + filepath.Join(dir, "nope.csv") + ": open"},
		{"a directory", []string{dir + "=d"}, "is not a regular file"},
		{"a file over limits.files_bytes", []string{big}, "--file " + big + ": is 8388609 bytes; the files of a run may hold 8388608 more (limits.files_bytes)"},
		{"files together over limits.files_bytes", []string{write("half.bin", 5<<20), write("other.bin", 4<<20)}, "other.bin: is 4194304 bytes; the files of a run may hold 3145728 more"},
		{"more files than limits.files", many, "--file: 33 files; the run allows at most 32 (limits.files)"},
		{"a name that climbs out", []string{small + "=../x"}, `--file ` + small + `=../x: /workspace/../x: path has a ".." component`},
		{"a name under out/", []string{small + "=out/x"}, "is under out/"},
		{"two files at one name", []string{small, small}, "--file " + small + ": /workspace/small.csv: is given twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := inputFiles(tt.args, limits.Default)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
	files, err := inputFiles([]string{small, small + "=data/in.csv"}, limits.Default)
	if err != nil || len(files) != 2 || files[0].Path != "small.csv" || files[1].Path != "data/in.csv" || len(files[1].Content) != 10 {
		t.Fatalf("%+v %v", files, err)
	}
}

func TestWriteArtifactsNeverFollowsALinkNorWritesThroughOne(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := openOut(out) // made when missing
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := os.Symlink(secret, filepath.Join(out, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(out, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "old.csv"), []byte("old content, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	art := func(name, data string) sandbox.Artifact {
		return sandbox.Artifact{Name: name, Bytes: int64(len(data)), Data: []byte(data)}
	}
	written, err := writeArtifacts(root, []sandbox.Artifact{
		art("link.txt", "pwned"), art("sub", "x"), art("../escape", "x"), art("a/b", "x"),
		art("old.csv", "new"), art("chart.png", "\x89PNG"),
	})
	if strings.Join(written, ",") != "old.csv,chart.png" {
		t.Errorf("written %v", written)
	}
	for _, want := range []string{`artifact "link.txt": ` + filepath.Join(out, "link.txt") + ` is there already, a symbolic link: left alone`,
		`artifact "sub": ` + filepath.Join(out, "sub") + ` is there already, a directory: left alone`, `artifact "../escape": name contains a slash`, `artifact "a/b": name contains a slash`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	if fi, _ := os.Lstat(filepath.Join(out, "link.txt")); fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "old.csv")); string(b) != "new" {
		t.Errorf("old.csv = %q, want it replaced whole", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); err == nil {
		t.Errorf("../escape was written outside --out")
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".execgate-") {
			t.Errorf("a temporary file is left: %s", e.Name())
		}
	}
}
