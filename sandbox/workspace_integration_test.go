package sandbox_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/workspace"
)

// Input files, stdin and artifacts (issue #24) through the real nsjail, at
// both levels: what the tool sees, and what comes back.

// workspaceProbe reads its inputs and stdin, tries to write where it may
// not, and leaves artifacts: one written to /workspace/out, one saved with
// a media type.
const workspaceProbe = `import os, sys
def run(args, context):
    out = {"cwd": os.getcwd(), "csv": open("data/in.csv").read(), "bin": open("/workspace/blob.bin", "rb").read().hex()}
    out["stdin"] = sys.stdin.read()
    for what, path, mode in (("input", "data/in.csv", "a"), ("workspace", "/workspace/new.txt", "w")):
        try:
            open(path, mode).write("x")
            out[what] = "written"
        except OSError as e:
            out[what] = e.strerror
    try:
        os.chmod("data/in.csv", 0o666)
        out["chmod"] = "changed"
    except OSError as e:
        out["chmod"] = e.strerror
    with open("out/report.csv", "w") as f:
        f.write("a,b\n1,2\n")
    out["saved"] = context.artifacts.save("chart.svg", "<svg/>", mime="image/svg+xml")
    context.artifacts.save("raw", b"\x00\x01\x02")
    return out
`

func TestFilesStdinAndArtifactsAtBothLevels(t *testing.T) {
	r := newRunner(t, nil)
	for _, level := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		t.Run("level "+level, func(t *testing.T) {
			res := run(t, r, sandbox.Spec{TenantID: "t1", Isolation: level, Source: workspaceProbe, Limits: limits.Default,
				Files: []sandbox.File{
					{Path: "data/in.csv", Content: []byte("x,y\n3,4\n")},
					{Path: "blob.bin", Content: []byte{0xff, 0x00, 0x7f}},
				},
				Stdin: "line one\nline two\n"})
			if res.Status != sandbox.StatusOK {
				t.Fatalf("run failed: %s", dump(res))
			}
			if res.Usage.Isolation != level {
				t.Fatalf("ran at level %q, want %q", res.Usage.Isolation, level)
			}
			var got map[string]string
			if err := json.Unmarshal(res.Result, &got); err != nil {
				t.Fatalf("result %s: %v", res.Result, err)
			}
			want := map[string]string{
				"cwd": "/workspace", "csv": "x,y\n3,4\n", "bin": "ff007f", "stdin": "line one\nline two\n",
				"input": "Permission denied", "workspace": "Read-only file system", "chmod": "Read-only file system",
				"saved": "/workspace/out/chart.svg",
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			checkArtifacts(t, res, []sandbox.Artifact{
				{Name: "chart.svg", MIME: "image/svg+xml", Data: []byte("<svg/>")},
				{Name: "raw", MIME: workspace.DefaultMIME, Data: []byte{0, 1, 2}},
				{Name: "report.csv", MIME: "text/csv", Data: []byte("a,b\n1,2\n")},
			})
			if len(res.Truncated.Artifacts) != 0 {
				t.Errorf("dropped %+v", res.Truncated.Artifacts)
			}
		})
	}
}

// checkArtifacts compares got's artifacts with want's names, media types
// and bytes, and checks their sizes and digests.
func checkArtifacts(t *testing.T, res sandbox.Result, want []sandbox.Artifact) {
	t.Helper()
	if len(res.Artifacts) != len(want) {
		t.Fatalf("artifacts %+v; want %d: %+v", res.Artifacts, len(want), want)
	}
	for i, w := range want {
		a := res.Artifacts[i]
		sum := sha256.Sum256(w.Data)
		if a.Name != w.Name || a.MIME != w.MIME || string(a.Data) != string(w.Data) || a.Bytes != int64(len(w.Data)) || a.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("artifact %d = {%q %q %d %s %q}, want {%q %q %d %x %q}", i, a.Name, a.MIME, a.Bytes, a.SHA256, a.Data, w.Name, w.MIME, len(w.Data), sum, w.Data)
		}
	}
}

func TestAWarmJailSeesTheFilesOfItsRun(t *testing.T) {
	r := newRunner(t, func(c *sandbox.Config) { c.WarmPool = 1 })
	for i, content := range []string{"first", "second"} {
		waitWarm(t, r, 1)
		res := run(t, r, sandbox.Spec{Source: "def run(args, context):\n    return open('in.txt').read()\n", Limits: limits.Default,
			Files: []sandbox.File{{Path: "in.txt", Content: []byte(content)}}})
		if res.Status != sandbox.StatusOK || string(res.Result) != `"`+content+`"` {
			t.Fatalf("run %d: %s", i, dump(res))
		}
		if !res.Usage.Warm {
			t.Errorf("run %d did not take a warm jail", i)
		}
	}
}

// A run's workspace is its own: nothing of another run's inputs or
// artifacts is there, at either level.
func TestNothingOfAnotherRunsWorkspaceRemains(t *testing.T) {
	r := newRunner(t, nil)
	for _, level := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		t.Run("level "+level, func(t *testing.T) {
			first := run(t, r, sandbox.Spec{TenantID: "t1", Isolation: level, Limits: limits.Default,
				Source: "def run(args, context):\n    open('/workspace/out/left.txt', 'w').write('x')\n    return 1\n",
				Files:  []sandbox.File{{Path: "secret.txt", Content: []byte("s")}}})
			if first.Status != sandbox.StatusOK || len(first.Artifacts) != 1 {
				t.Fatalf("first run: %s", dump(first))
			}
			second := run(t, r, sandbox.Spec{TenantID: "t1", Isolation: level, Limits: limits.Default,
				Source: "import os\ndef run(args, context):\n    return sorted(os.listdir('/workspace')) + sorted(os.listdir('/workspace/out'))\n"})
			if second.Status != sandbox.StatusOK || string(second.Result) != `["out"]` || len(second.Artifacts) != 0 {
				t.Fatalf("second run sees %s, artifacts %+v", second.Result, second.Artifacts)
			}
		})
	}
}

func TestJavaScriptFilesStdinAndArtifacts(t *testing.T) {
	r := newJSRunner(t, nil)
	src := `export async function run(args, context) {
  const out = { csv: await Deno.readTextFile("data/in.csv"), abs: Deno.readTextFileSync("/workspace/data/in.csv") };
  const buf = new Uint8Array(5);
  const n = Deno.stdin.readSync(buf);
  out.stdin = new TextDecoder().decode(buf.subarray(0, n ?? 0)) + "|" + await new Response(Deno.stdin.readable).text();
  for (const [what, f] of [["input", () => Deno.writeTextFileSync("data/in.csv", "x")], ["outside", () => Deno.readTextFileSync("/etc/passwd")], ["tmp", () => Deno.writeTextFileSync("/tmp/x", "x")]]) {
    try { f(); out[what] = "allowed"; } catch (e) { out[what] = e.name; }
  }
  Deno.writeTextFileSync("/workspace/out/direct.txt", "hi");
  out.saved = context.artifacts.save("chart.png", new Uint8Array([137, 80, 78, 71]));
  context.artifacts.save("data.bin", "text", "application/x-custom");
  try { context.artifacts.save("../../x", "no"); out.escape = "allowed"; } catch (e) { out.escape = e.name; }
  return out;
}
`
	res := run(t, r, sandbox.Spec{Language: sandbox.LanguageJavaScript, Source: src, Limits: limits.Default,
		Files: []sandbox.File{{Path: "data/in.csv", Content: []byte("x,y\n")}}, Stdin: "from stdin"})
	if res.Status != sandbox.StatusOK {
		t.Fatalf("run failed: %s", dump(res))
	}
	var got map[string]string
	if err := json.Unmarshal(res.Result, &got); err != nil {
		t.Fatalf("result %s: %v", res.Result, err)
	}
	want := map[string]string{"csv": "x,y\n", "abs": "x,y\n", "stdin": "from |stdin", "input": "NotCapable", "outside": "NotCapable", "tmp": "NotCapable",
		"saved": "/workspace/out/chart.png", "escape": "RangeError"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (result %s)", k, got[k], v, res.Result)
		}
	}
	checkArtifacts(t, res, []sandbox.Artifact{
		{Name: "chart.png", MIME: "image/png", Data: []byte{137, 80, 78, 71}},
		{Name: "data.bin", MIME: "application/x-custom", Data: []byte("text")},
		{Name: "direct.txt", MIME: "text/plain", Data: []byte("hi")},
	})
}

// The runner refuses input files beyond the run's limits, or with a bad
// path, before any jail starts.
func TestTheRunnerRefusesBadFileSets(t *testing.T) {
	r := newRunner(t, nil)
	few := limits.Default
	few.Files, few.FilesBytes = 2, 10
	for _, tt := range []struct {
		name  string
		files []sandbox.File
		want  string
	}{
		{"more files than limits.files", []sandbox.File{{Path: "a"}, {Path: "b"}, {Path: "c"}}, "limits.files is 2"},
		{"more bytes than limits.files_bytes", []sandbox.File{{Path: "a", Content: make([]byte, 11)}}, "limits.files_bytes is 10"},
		{"an escaping path", []sandbox.File{{Path: "a/../../b"}}, `files[0] "a/../../b"`},
		{"a path under out/", []sandbox.File{{Path: "out/x"}}, "under out/"},
		{"a file that is also a directory", []sandbox.File{{Path: "a"}, {Path: "a/b"}}, `below "a", which is a file`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, sandbox.Spec{Source: "def run(a, c):\n    return 1\n", Limits: few, Files: tt.files})
			if res.ErrorType() != sandbox.ErrInvalidInput || !strings.Contains(res.Error.Message, tt.want) {
				t.Fatalf("got %s; want InvalidInput naming %q", dump(res), tt.want)
			}
		})
	}
}

// hostileOut is a tool that leaves everything but plain files in
// /workspace/out: links to the jail's /etc/passwd and to a host path, a
// FIFO, a socket, a directory, names the runner refuses, a file over the
// bytes left, a sparse file as large as RLIMIT_FSIZE lets it, and as many
// files as the tmpfs takes; and a daemon that keeps writing after the run
// returns. (Its 100 GiB sparse file is refused by RLIMIT_FSIZE in the
// jail; package workspace's own test shows the collection refusing one by
// its size.) Names sort the interesting drops before the many files.
const hostileOut = `import os, signal, socket, time
def run(args, context):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    out = "/workspace/out/"
    os.symlink("/etc/passwd", out + "link-passwd")
    os.symlink(args["host_path"], out + "link-host")
    os.mkfifo(out + "fifo")
    s = socket.socket(socket.AF_UNIX)
    s.bind(out + "b-sock")
    os.mkdir(out + "dir")
    open(out + "dir/inner.txt", "w").write("inner")
    open(out + "bad\x01name", "w").write("x")
    open(out + "back\\slash", "w").write("x")
    try:
        context.artifacts.save("../../x", "escape")
        escaped = True
    except ValueError:
        escaped = False
    open(out + "a-small.txt", "w").write("small")
    with open(out + "big.bin", "wb") as f:
        f.write(b"\0" * (args["big"]))
    sparse = "ok"
    with open(out + "b-sparse.bin", "wb") as f:
        try:
            f.truncate(100 << 30)
        except OSError as e:
            sparse = e.strerror
            f.truncate(args["sparse"])
    made = 0
    try:
        for i in range(100000):
            open(out + "many-%06d" % i, "w").close()
            made += 1
    except OSError as e:
        err = e.strerror
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(out + "grow.txt", "ab") as f:
                while True:
                    f.write(b"x" * 65536)
                    f.flush()
        os._exit(0)
    time.sleep(0.2)
    return {"escaped": escaped, "made": made, "err": err, "sparse": sparse}
`

func TestHostileArtifactsAreDroppedWithReasons(t *testing.T) {
	r := newRunner(t, nil)
	l := limits.Default
	l.TmpMB, l.Artifacts, l.ArtifactsBytes = 16, 8, 1<<20
	for _, level := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		t.Run("level "+level, func(t *testing.T) {
			args, _ := json.Marshal(map[string]any{"host_path": r.Info().RootfsDir + "/etc/execgate/manifest.json", "big": 2 << 20, "sparse": 12 << 20})
			start := time.Now()
			res := run(t, r, sandbox.Spec{TenantID: "t1", Isolation: level, Source: hostileOut, Args: args, Limits: l})
			took := time.Since(start)
			if res.Status != sandbox.StatusOK {
				t.Fatalf("run failed: %s", dump(res))
			}
			if took > time.Duration(stretch(8000))*time.Millisecond {
				t.Errorf("the run took %v", took)
			}
			var got struct {
				Escaped bool   `json:"escaped"`
				Made    int    `json:"made"`
				Err     string `json:"err"`
				Sparse  string `json:"sparse"`
			}
			if err := json.Unmarshal(res.Result, &got); err != nil {
				t.Fatalf("result %s", res.Result)
			}
			if got.Escaped || got.Made >= 100000 || got.Err != "No space left on device" {
				t.Errorf("tool: %+v; want save refused, and the tmpfs out of inodes", got)
			}
			t.Logf("the tool made %d files before %q; its 100 GiB sparse file: %s", got.Made, got.Err, got.Sparse)
			var names []string
			for _, a := range res.Artifacts {
				names = append(names, a.Name)
			}
			// In name order, within limits.artifacts (8): the small file,
			// the growing one if it fits, the first of the many.
			if len(res.Artifacts) != 8 || res.Artifacts[0].Name != "a-small.txt" || string(res.Artifacts[0].Data) != "small" {
				t.Errorf("collected %q", names)
			}
			var total int64
			for _, a := range res.Artifacts {
				total += a.Bytes
				if int64(len(a.Data)) != a.Bytes {
					t.Errorf("artifact %q: %d bytes of data, says %d", a.Name, len(a.Data), a.Bytes)
				}
			}
			if total > l.ArtifactsBytes {
				t.Errorf("collected %d bytes, over limits.artifacts_bytes %d", total, l.ArtifactsBytes)
			}
			reasons := map[string]string{}
			for _, d := range res.Truncated.Artifacts {
				reasons[d.Name] = d.Reason
			}
			for name, want := range map[string]string{
				"link-passwd": workspace.ReasonSymlink, "link-host": workspace.ReasonSymlink, "fifo": workspace.ReasonFIFO,
				"b-sock": workspace.ReasonSocket, "dir": workspace.ReasonDirectory, "bad\x01name": "an invalid name",
				"back\\slash": "an invalid name", "big.bin": workspace.ReasonBytes, "b-sparse.bin": workspace.ReasonBytes,
			} {
				if !strings.HasPrefix(reasons[name], want) {
					t.Errorf("%q dropped for %q; want %q", name, reasons[name], want)
				}
			}
			if len(res.Truncated.Artifacts) != workspace.MaxDropped || res.Truncated.ArtifactsDropped < got.Made-8 {
				t.Errorf("dropped list of %d, count %d; want %d listed and at least %d counted", len(res.Truncated.Artifacts), res.Truncated.ArtifactsDropped, workspace.MaxDropped, got.Made-8)
			}
		})
	}
}
