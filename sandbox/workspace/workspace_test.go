package workspace_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox/workspace"
)

func TestCheckPath(t *testing.T) {
	long := strings.Repeat("a", workspace.MaxNameBytes+1)
	for _, tt := range []struct {
		path string
		want string // "" valid; else a substring of the error
	}{
		{"data/in.csv", ""},
		{"in.csv", ""},
		{"a/b/c/d/e/f/g/h", ""},
		{"données/é.txt", ""},
		{".hidden", ""},
		{"", "empty"},
		{"../x", `".."`},
		{"a/../../b", `".."`},
		{"a/..", `".."`},
		{"/etc/passwd", "absolute"},
		{"a//b", "normalised"},
		{"a/./b", "normalised"},
		{"a/", "normalised"},
		{".", "normalised"},
		{"a\x00b", "control character"},
		{"a\nb", "control character"},
		{"a\u0085b", "control character"},
		{"a\\b", "backslash"},
		{"a\xffb", "UTF-8"},
		{long, "component of 256 bytes"},
		{strings.Repeat("ab/", 400) + "c", "bytes; at most 1024"},
		{"a/b/c/d/e/f/g/h/i", "9 components deep"},
		{"out/x", "under out/"},
		{"out", "under out/"},
		{"outside/x", ""},
	} {
		err := workspace.CheckPath(tt.path)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckPath(%q) = %v", tt.path, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckPath(%q) = %v; want an error with %q", tt.path, err, tt.want)
		}
	}
}

func TestCheckNameAndMIME(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"chart.png", true}, {"résumé final.pdf", true}, {".hidden", true},
		{"", false}, {".", false}, {"..", false}, {"../../x", false}, {"a/b", false}, {"a\\b", false},
		{"bad\x01name", false}, {"del\x7f", false}, {strings.Repeat("x", 256), false}, {"\xff", false},
	} {
		if err := workspace.CheckName(tt.name); (err == nil) != tt.ok {
			t.Errorf("CheckName(%q) = %v", tt.name, err)
		}
	}
	for _, tt := range []struct {
		mime string
		ok   bool
	}{
		{"image/png", true}, {"application/vnd.apache.parquet", true}, {"text/x-c++src", true},
		{"text/html; charset=utf-8", false}, {"Image/PNG", false}, {"image", false}, {"/png", false}, {"image/", false},
		{"image/png\r\nX-Evil: 1", false},
	} {
		if err := workspace.CheckMIME(tt.mime); (err == nil) != tt.ok {
			t.Errorf("CheckMIME(%q) = %v", tt.mime, err)
		}
	}
	for name, want := range map[string]string{"a.PNG": "image/png", "r.csv": "text/csv", "x": workspace.DefaultMIME, "x.unknown": workspace.DefaultMIME} {
		if got := workspace.MIMEOf(name, ""); got != want {
			t.Errorf("MIMEOf(%q) = %q, want %q", name, got, want)
		}
	}
	if got := workspace.MIMEOf("a.png", "text/html; x"); got != "image/png" {
		t.Errorf("a bad explicit media type was taken: %q", got)
	}
	if got := workspace.MIMEOf("a.png", "image/webp"); got != "image/webp" {
		t.Errorf("an explicit media type was not taken: %q", got)
	}
}

func TestCheckFilesNamesTheFirstConflict(t *testing.T) {
	for _, tt := range []struct {
		paths []string
		at    int
		want  string
	}{
		{[]string{"a", "b/c", "b/d"}, -1, ""},
		{[]string{"a", "a"}, 1, "twice"},
		{[]string{"a", "a/b"}, 1, `below "a"`},
		{[]string{"a/b", "a"}, 1, "also the directory"},
		{[]string{"x", "../y"}, 1, `".."`},
	} {
		var files []workspace.File
		for _, p := range tt.paths {
			files = append(files, workspace.File{Path: p})
		}
		at, err := workspace.CheckFiles(files)
		if at != tt.at || (tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want))) {
			t.Errorf("CheckFiles(%q) = %d, %v; want %d, %q", tt.paths, at, err, tt.at, tt.want)
		}
	}
}

// newWorkspace makes a real workspace (root only: it mounts).
func newWorkspace(t *testing.T, c workspace.Config) *workspace.Workspace {
	t.Helper()
	testenv.RequireRoot(t)
	if c.Files == 0 {
		c.Files, c.FilesBytes, c.OutBytes, c.UID = 8, 1<<20, 1<<20, 99999
	}
	w, err := workspace.New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}

// attach attaches w below a fresh directory and returns out/'s host path,
// where a test plays the tool.
func attach(t *testing.T, w *workspace.Workspace) (root, out string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	if err := w.Attach(dir); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(w.Close) // before the temporary directory's removal
	return dir, filepath.Join(dir, "out")
}

func TestWriteMakesReadOnlyRootFiles(t *testing.T) {
	w := newWorkspace(t, workspace.Config{})
	root, _ := attach(t, w)
	if err := w.Write([]workspace.File{{Path: "data/in.csv", Content: []byte("a,b\n")}, {Path: "top.txt", Content: []byte("t")}}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	for p, mode := range map[string]os.FileMode{"data": os.ModeDir | 0o755, "data/in.csv": 0o444, "top.txt": 0o444, "out": os.ModeDir | 0o700} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "data/in.csv")); string(b) != "a,b\n" {
		t.Errorf("data/in.csv holds %q", b)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "out"), &st); err != nil || st.Uid != 99999 {
		t.Errorf("out/ is owned by %d (%v), want the jail's uid", st.Uid, err)
	}
	if err := w.Write(nil); err == nil {
		t.Errorf("a second Write was accepted")
	}
}

func TestWriteRefusesMoreThanTheWorkspaceIsFor(t *testing.T) {
	w := newWorkspace(t, workspace.Config{Files: 2, FilesBytes: 10, OutBytes: 1 << 20, UID: 99999})
	if err := w.Write([]workspace.File{{Path: "a", Content: make([]byte, 11)}}); err == nil {
		t.Fatalf("11 bytes written into a workspace for 10")
	}
	w = newWorkspace(t, workspace.Config{Files: 2, FilesBytes: 10, OutBytes: 1 << 20, UID: 99999})
	if err := w.Write([]workspace.File{{Path: "../a"}}); err == nil || !strings.Contains(err.Error(), `".."`) {
		t.Fatalf("an escaping path was written: %v", err)
	}
}

// Collect never follows a link, never waits on a FIFO and never reads a
// file larger than the bytes left: a sparse 100 GiB file (the host makes
// it here: in a jail RLIMIT_FSIZE stops a tool earlier) is refused by its
// size, at once and without its bytes.
func TestCollectRefusesWhatIsNotAPlainFileWithinBounds(t *testing.T) {
	w := newWorkspace(t, workspace.Config{Files: 8, FilesBytes: 1 << 20, OutBytes: 8 << 20, UID: 99999})
	_, out := attach(t, w)
	secret := filepath.Join(t.TempDir(), "host-secret")
	must(t, os.WriteFile(secret, []byte("host secret"), 0o644))
	must(t, os.Symlink(secret, filepath.Join(out, "link")))
	must(t, unix.Mkfifo(filepath.Join(out, "fifo"), 0o644))
	must(t, os.WriteFile(filepath.Join(out, "ok.txt"), []byte("fine"), 0o644))
	f, err := os.Create(filepath.Join(out, "sparse"))
	must(t, err)
	must(t, f.Truncate(100<<30))
	f.Close()
	must(t, os.WriteFile(filepath.Join(out, "bad\nname"), []byte("x"), 0o644))

	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	c := w.Collect(workspace.Bounds{Artifacts: 10, Bytes: 1 << 20})
	took := time.Since(start)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if took > time.Second || after.TotalAlloc-before.TotalAlloc > 1<<20 {
		t.Errorf("Collect took %v and allocated %d bytes", took, after.TotalAlloc-before.TotalAlloc)
	}
	if len(c.Artifacts) != 1 || c.Artifacts[0].Name != "ok.txt" || string(c.Artifacts[0].Data) != "fine" || c.Artifacts[0].MIME != "text/plain" {
		t.Fatalf("artifacts %+v", c.Artifacts)
	}
	reasons := map[string]string{}
	for _, d := range c.Dropped {
		reasons[d.Name] = d.Reason
	}
	for name, want := range map[string]string{"link": workspace.ReasonSymlink, "fifo": workspace.ReasonFIFO, "sparse": workspace.ReasonBytes, "bad\nname": "an invalid name"} {
		if !strings.HasPrefix(reasons[name], want) {
			t.Errorf("%q: dropped for %q, want %q", name, reasons[name], want)
		}
	}
	if c.DroppedCount != 4 {
		t.Errorf("dropped %d, want 4", c.DroppedCount)
	}
}

func TestCollectKeepsWithinTheCountAndBytes(t *testing.T) {
	w := newWorkspace(t, workspace.Config{})
	_, out := attach(t, w)
	for _, n := range []string{"a", "b", "c", "d"} {
		must(t, os.WriteFile(filepath.Join(out, n), []byte(strings.Repeat(n, 10)), 0o644))
	}
	c := w.Collect(workspace.Bounds{Artifacts: 2, Bytes: 15, MIMEs: map[string]string{"a": "image/png"}})
	if len(c.Artifacts) != 1 || c.Artifacts[0].Name != "a" || c.Artifacts[0].MIME != "image/png" {
		t.Fatalf("artifacts %+v; want a alone (b is over the 15 bytes)", c.Artifacts)
	}
	want := []workspace.Dropped{{Name: "b", Reason: "over limits.artifacts_bytes (10 bytes; 5 of 15 left)"}, {Name: "c", Reason: "over limits.artifacts_bytes (10 bytes; 5 of 15 left)"}, {Name: "d", Reason: "over limits.artifacts_bytes (10 bytes; 5 of 15 left)"}}
	if len(c.Dropped) != 3 || c.Dropped[0] != want[0] || c.Dropped[2] != want[2] {
		t.Errorf("dropped %+v", c.Dropped)
	}
	c = w.Collect(workspace.Bounds{Artifacts: 2, Bytes: 100})
	if len(c.Artifacts) != 2 || c.DroppedCount != 2 || !strings.HasPrefix(c.Dropped[0].Reason, workspace.ReasonCount) {
		t.Errorf("with room for 2: %+v", c)
	}
}

// The workspace's tmpfs are the host's, detached: once closed, nothing is
// left mounted, and out/ has a bounded number of entries.
func TestOutHoldsABoundedNumberOfEntries(t *testing.T) {
	w := newWorkspace(t, workspace.Config{})
	root, out := attach(t, w)
	n := 0
	for ; n < 10000; n++ {
		f, err := os.Create(filepath.Join(out, fmt.Sprintf("f%06d", n)))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("creating file %d: %v", n, err)
			}
			break
		}
		f.Close()
	}
	if n >= 10000 {
		t.Fatalf("out/ took %d files", n)
	}
	c := w.Collect(workspace.Bounds{Artifacts: 5, Bytes: 100})
	if len(c.Artifacts) != 5 || c.DroppedCount != n-5 || len(c.Dropped) != workspace.MaxDropped {
		t.Errorf("%d files: collected %d, dropped %d (%d listed)", n, len(c.Artifacts), c.DroppedCount, len(c.Dropped))
	}
	w.Close()
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the workspace's mount point is left: %v", err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), root) {
		t.Errorf("still mounted at %s", root)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The clones level process gets (Clones) work the same whichever way the
// kernel makes them: through the detached mounts' descriptors (Linux 6.15
// and later) or attached for the moment of the clone (older kernels,
// ClonesAttached on any): inputs written after the clone are seen through
// it, read-only; what the tool writes to out/'s clone is collected; and
// nothing stays mounted anywhere.
func TestClonesSeeTheWorkspaceOnEveryKernel(t *testing.T) {
	for name, clones := range map[string]func(*workspace.Workspace) (*os.File, *os.File, error){
		"Clones":         (*workspace.Workspace).Clones,
		"ClonesAttached": (*workspace.Workspace).ClonesAttached,
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorkspace(t, workspace.Config{})
			before, _ := os.ReadFile("/proc/self/mountinfo")
			ro, out, err := clones(w)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			after, _ := os.ReadFile("/proc/self/mountinfo")
			if string(after) != string(before) {
				t.Errorf("the clone left mounts behind:\n%s", after)
			}
			// Play the zygote's child: attach the clones in a directory.
			dir := t.TempDir()
			in, outDir := filepath.Join(dir, "in"), filepath.Join(dir, "out")
			must(t, os.Mkdir(in, 0o755))
			must(t, os.Mkdir(outDir, 0o755))
			must(t, unix.MoveMount(int(ro.Fd()), "", unix.AT_FDCWD, in, unix.MOVE_MOUNT_F_EMPTY_PATH))
			t.Cleanup(func() { _ = unix.Unmount(in, unix.MNT_DETACH) })
			must(t, unix.MoveMount(int(out.Fd()), "", unix.AT_FDCWD, outDir, unix.MOVE_MOUNT_F_EMPTY_PATH))
			t.Cleanup(func() { _ = unix.Unmount(outDir, unix.MNT_DETACH) })
			ro.Close()
			out.Close()
			must(t, w.Write([]workspace.File{{Path: "in.txt", Content: []byte("input")}}))
			if b, err := os.ReadFile(filepath.Join(in, "in.txt")); err != nil || string(b) != "input" {
				t.Errorf("the input written after the clone reads %q, %v", b, err)
			}
			if err := os.WriteFile(filepath.Join(in, "new"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
				t.Errorf("writing into the inputs' clone: %v, want EROFS", err)
			}
			must(t, os.WriteFile(filepath.Join(outDir, "chart.csv"), []byte("a,b\n"), 0o644))
			c := w.Collect(workspace.Bounds{Artifacts: 4, Bytes: 1 << 20})
			if len(c.Artifacts) != 1 || c.Artifacts[0].Name != "chart.csv" || string(c.Artifacts[0].Data) != "a,b\n" {
				t.Errorf("collected %+v, want chart.csv", c)
			}
		})
	}
}
