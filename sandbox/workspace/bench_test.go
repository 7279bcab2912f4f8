package workspace_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox/workspace"
)

// What a workspace costs the runner, without a jail: making one (every
// run pays it: a warm jail and a spare ahead of their runs, a cold jail in
// its start), and writing one input file and collecting one small
// artifact (what a run with a file and an artifact adds).

var benchConfig = workspace.Config{Files: 32, FilesBytes: 8 << 20, OutBytes: 64 << 20, UID: 99999}

// BenchmarkMakeAttachClose is a level-jail workspace's life without its
// run: two tmpfs made, attached for nsjail, detached and let go.
func BenchmarkMakeAttachClose(b *testing.B) {
	testenv.RequireRoot(b)
	dir := b.TempDir()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w, err := workspace.New(benchConfig)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Attach(filepath.Join(dir, "ws")); err != nil {
			b.Fatal(err)
		}
		w.Close()
	}
}

// BenchmarkMakeClonesClose is a level-process workspace's: made, cloned
// for the run's process, let go.
func BenchmarkMakeClonesClose(b *testing.B) {
	testenv.RequireRoot(b)
	b.ReportAllocs()
	for b.Loop() {
		w, err := workspace.New(benchConfig)
		if err != nil {
			b.Fatal(err)
		}
		ro, out, err := w.Clones()
		if err != nil {
			b.Fatal(err)
		}
		ro.Close()
		out.Close()
		w.Close()
	}
}

// BenchmarkOneFileInOneArtifactOut is what a run with one input file and
// one small artifact adds at the hand-off and after the run (the tool's
// own write of the artifact is played here by the host).
func BenchmarkOneFileInOneArtifactOut(b *testing.B) {
	testenv.RequireRoot(b)
	dir := b.TempDir()
	files := []workspace.File{{Path: "in.txt", Content: []byte("one small input file\n")}}
	bounds := workspace.Bounds{Artifacts: 32, Bytes: 8 << 20}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		w, err := workspace.New(benchConfig)
		if err != nil {
			b.Fatal(err)
		}
		ws := filepath.Join(dir, "ws")
		if err := w.Attach(ws); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "out", "copy.txt"), []byte("one small input file\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := w.Write(files); err != nil {
			b.Fatal(err)
		}
		if c := w.Collect(bounds); len(c.Artifacts) != 1 {
			b.Fatalf("collected %+v", c)
		}
		b.StopTimer()
		w.Close()
		b.StartTimer()
	}
}
