package app_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/tenancy"
)

// Issue #24 through the real gateway and nsjail: input files and stdin in,
// artifacts out (in the envelope, and from GET
// /v1/executions/{id}/artifacts/{name}), at both levels and in both
// languages, sync and async, in memory and in Redis.

// filesTool reads its inputs and stdin and leaves three artifacts: a CSV
// written to /workspace/out, a small PNG saved with its media type, and
// a file too large to inline.
const filesTool = `import sys
def run(args, context):
    rows = open("data/in.csv").read().splitlines()
    blob = open("/workspace/bin/blob.bin", "rb").read()
    with open("out/report.csv", "w") as f:
        f.write("rows,blob,stdin\n%d,%s,%s\n" % (len(rows), blob.hex(), sys.stdin.read().strip()))
    context.artifacts.save("chart.png", bytes(range(256)) * 4, mime="image/png")
    context.artifacts.save("résumé final.txt", "é" * 50000)
    return {"rows": len(rows)}
`

func filesBody(id string, extra map[string]any) map[string]any {
	b := map[string]any{
		"execution_id": id,
		"source":       filesTool,
		"files": []map[string]any{
			{"path": "data/in.csv", "content": "a,b\n1,2\n3,4\n"},
			{"path": "bin/blob.bin", "content": base64.StdEncoding.EncodeToString([]byte{0xde, 0xad, 0xbe, 0xef}), "encoding": "base64"},
		},
		"stdin":  "from stdin\n",
		"limits": stretchedLimits(),
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// wantFilesEnvelope checks the envelope of filesTool and returns its
// artifacts by name.
func wantFilesEnvelope(t *testing.T, env map[string]any) map[string]map[string]any {
	t.Helper()
	if env["status"] != "ok" || fmt.Sprint(env["result"]) != "map[rows:3]" {
		t.Fatalf("envelope %v", env)
	}
	list, _ := env["artifacts"].([]any)
	got := map[string]map[string]any{}
	var names []string
	for _, a := range list {
		m := a.(map[string]any)
		got[m["name"].(string)] = m
		names = append(names, m["name"].(string))
	}
	if strings.Join(names, "|") != "chart.png|report.csv|résumé final.txt" {
		t.Fatalf("artifacts %q, want them in name order", names)
	}
	report := "rows,blob,stdin\n3,deadbeef,from stdin\n"
	png := strings.Repeat(string(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}()), 4)
	for name, want := range map[string]struct {
		data, mime string
		inline     bool
	}{
		"report.csv":       {report, "text/csv", true},
		"chart.png":        {png, "image/png", true},
		"résumé final.txt": {strings.Repeat("é", 50000), "text/plain", false}, // 100000 bytes: over the 64 KiB inline cap
	} {
		a := got[name]
		sum := sha256.Sum256([]byte(want.data))
		if a["mime"] != want.mime || a["bytes"] != float64(len(want.data)) || a["sha256"] != hex.EncodeToString(sum[:]) {
			t.Errorf("artifact %s = %v", name, a)
		}
		b64, inline := a["base64"].(string)
		if inline != want.inline || (inline && b64 != base64.StdEncoding.EncodeToString([]byte(want.data))) {
			t.Errorf("artifact %s: inline %v (%d chars), want inline %v", name, inline, len(b64), want.inline)
		}
	}
	return got
}

// fetchArtifact GETs one artifact (name path-escaped) and checks what an
// attachment must carry.
func (s *server) fetchArtifact(t *testing.T, token, id, name, query string) response {
	t.Helper()
	r := s.do(http.MethodGet, "/v1/executions/"+id+"/artifacts/"+url.PathEscape(name)+query, token, nil)
	if r.status == http.StatusOK {
		if r.header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment;") ||
			!strings.Contains(r.header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("artifact %s headers: %v", name, r.header)
		}
	}
	return r
}

func TestFilesStdinAndArtifactsThroughTheGateway(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var redisURL string
			if backend == "redis" {
				redisURL = testenv.Redis(t).URL()
			}
			mutate := func(c *config.Config) {
				if backend == "redis" {
					c.Quota.Backend, c.Quota.RedisURL = "redis", redisURL
				}
				fast := config.DemoTenant()
				fast.ID = "fast"
				fast.Policy["isolation"] = []any{"jail", "process"}
				c.Tenants = append(c.Tenants, fast)
			}
			s := start(t, setup{mutate: mutate})
			tok := s.token("fast")
			for _, level := range []string{"jail", "process"} {
				id := "files-" + level
				r := s.execute(tok, filesBody(id, map[string]any{"isolation": level}))
				if r.status != http.StatusOK {
					t.Fatalf("%s: %d %s", level, r.status, r.body)
				}
				env := r.json(t)
				if u, _ := env["usage"].(map[string]any); u["isolation"] != level {
					t.Fatalf("ran at %v, want %s", u["isolation"], level)
				}
				arts := wantFilesEnvelope(t, env)
				for name, a := range arts {
					g := s.fetchArtifact(t, tok, id, name, "")
					sum := sha256.Sum256(g.body)
					if g.status != http.StatusOK || hex.EncodeToString(sum[:]) != a["sha256"] || g.header.Get("Content-Type") != a["mime"] || g.header.Get("X-Artifact-Sha256") != a["sha256"] {
						t.Errorf("GET %s: %d %q, %d bytes", name, g.status, g.header.Get("Content-Type"), len(g.body))
					}
				}
				cd := s.fetchArtifact(t, tok, id, "résumé final.txt", "").header.Get("Content-Disposition")
				if cd != `attachment; filename="r_sum_ final.txt"; filename*=UTF-8''r%C3%A9sum%C3%A9%20final.txt` {
					t.Errorf("Content-Disposition %q", cd)
				}
				// The audit record has the files and the artifacts.
				recs := s.auditOf(id)
				if len(recs) != 1 {
					t.Fatalf("audit records %v", recs)
				}
				files, _ := recs[0]["files"].([]any)
				artRecs, _ := recs[0]["artifacts"].([]any)
				if len(files) != 2 || len(artRecs) != 3 || files[0].(map[string]any)["path"] != "data/in.csv" || artRecs[0].(map[string]any)["mime"] != "image/png" {
					t.Errorf("audit files %v, artifacts %v", files, artRecs)
				}
			}

			// Another tenant: 404 like an artifact that never existed; an
			// admin names the tenant.
			other := s.fetchArtifact(t, s.token("acme"), "files-jail", "chart.png", "")
			never := s.fetchArtifact(t, tok, "files-jail", "no-such.png", "")
			if other.status != http.StatusNotFound || never.status != http.StatusNotFound || other.errType(t) != "NotFound" {
				t.Errorf("another tenant: %d %s; an unknown name: %d", other.status, other.body, never.status)
			}
			if r := s.fetchArtifact(t, s.token("acme", tenancy.RoleAdmin), "files-jail", "chart.png", "?tenant=fast"); r.status != http.StatusOK || len(r.body) != 1024 {
				t.Errorf("an admin naming the tenant: %d", r.status)
			}
			for _, bad := range []string{"..", "a\\b", "%2e%2e"} {
				if r := s.do(http.MethodGet, "/v1/executions/files-jail/artifacts/"+bad, tok, nil); r.status != http.StatusNotFound {
					t.Errorf("artifact name %q: %d", bad, r.status)
				}
			}

			// Async, in JavaScript: the same files, artifacts from the store.
			js := `export function run(args, context) {
  const rows = Deno.readTextFileSync("data/in.csv").trim().split("\n").length;
  const buf = new Uint8Array(64);
  const stdin = new TextDecoder().decode(buf.subarray(0, Deno.stdin.readSync(buf) ?? 0)).trim();
  Deno.writeTextFileSync("/workspace/out/rows.txt", String(rows));
  context.artifacts.save("data.json", JSON.stringify({ rows }), "application/json");
  return { rows, stdin };
}
`
			body := filesBody("files-js", map[string]any{"language": "javascript", "source": js})
			if r := s.do(http.MethodPost, "/v1/executions", tok, body); r.status != http.StatusAccepted {
				t.Fatalf("submit: %d %s", r.status, r.body)
			}
			done := s.waitExecution(tok, "files-js", "done")
			env, _ := done["envelope"].(map[string]any)
			arts, _ := env["artifacts"].([]any)
			if env["status"] != "ok" || fmt.Sprint(env["result"]) != "map[rows:3 stdin:from stdin]" || len(arts) != 2 {
				t.Fatalf("async JavaScript: %v", done)
			}
			if r := s.fetchArtifact(t, tok, "files-js", "data.json", ""); r.status != http.StatusOK || string(r.body) != `{"rows":3}` || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("GET data.json: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
			}
			if backend == "redis" {
				// Any replica serves them.
				s2 := start(t, setup{noop: true, mutate: mutate})
				if r := s2.fetchArtifact(t, s2.token("fast"), "files-jail", "report.csv", ""); r.status != http.StatusOK || !strings.HasPrefix(string(r.body), "rows,blob,stdin") {
					t.Errorf("a second gateway: %d %s", r.status, r.body)
				}
			}
		})
	}
}

// Bad input files are refused with a status and a message naming the
// file, and nothing runs: paths that escape or are not normalised, NUL,
// over-long names, ten thousand tiny files, more files than the policy
// grants, and a body declared at 2 GB (refused before it is read).
func TestBadInputFilesAreRefusedNamingTheFileAndNothingRuns(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		small := config.DemoTenant()
		small.ID = "small"
		small.Policy["max_limits"] = map[string]any{"files": 2, "files_bytes": 10}
		c.Tenants = append(c.Tenants, small)
	}})
	file := func(p, content string) map[string]any { return map[string]any{"path": p, "content": content} }
	many := make([]map[string]any, 10000)
	for i := range many {
		many[i] = file(fmt.Sprintf("f%d", i), "")
	}
	for _, tt := range []struct {
		name    string
		tenant  string
		files   []map[string]any
		status  int
		message string
	}{
		{"a parent directory", "demo", []map[string]any{file("../x", "")}, 400, `files[0].path: "../x" has a ".." component`},
		{"an absolute path", "demo", []map[string]any{file("/etc/passwd", "")}, 400, `files[0].path: "/etc/passwd" is absolute`},
		{"a path that climbs out", "demo", []map[string]any{file("ok.txt", ""), file("a/../../b", "")}, 400, `files[1].path: "a/../../b"`},
		{"a NUL", "demo", []map[string]any{file("a\x00b", "")}, 400, "files[0].path"},
		{"an over-long name", "demo", []map[string]any{file(strings.Repeat("n", 300), "")}, 400, "at most 255"},
		{"ten thousand tiny files", "demo", many, 413, "files: 10000 files; the platform allows at most 1000"},
		{"more files than the policy grants", "small", []map[string]any{file("a", ""), file("b", ""), file("c", "")}, 413, `files[2] ("c"): is one file more than the 2`},
		{"more bytes than the policy grants", "small", []map[string]any{file("a", "12345"), file("b", "123456")}, 413, `files[1] ("b"): brings the files to 11 bytes`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := s.runs.Load()
			r := s.execute(s.token(tt.tenant), map[string]any{"source": "def run(a, c):\n    return 1\n", "files": tt.files})
			e, _ := r.json(t)["error"].(map[string]any)
			if r.status != tt.status || !strings.Contains(fmt.Sprint(e["message"]), tt.message) {
				t.Fatalf("%d %s; want %d naming %q", r.status, r.body, tt.status, tt.message)
			}
			if n := s.runs.Load() - before; n != 0 {
				t.Fatalf("%d runs for a refused request", n)
			}
		})
	}

	t.Run("a body declared at 2 GB is refused before it is read", func(t *testing.T) {
		u, _ := url.Parse(s.app.URL())
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/execute HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 2147483648\r\n\r\n{\"source\":\"x\",\"files\":[", s.token("demo"))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "2147483648 bytes declared") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
}

// hostileArtifacts leaves everything but plain files in /workspace/out and
// a daemon writing on after the run: the run answers, what is not a plain
// file within the limits is dropped with a reason, nothing escapes.
const hostileArtifacts = `import os, socket, time
def run(args, context):
    out = "/workspace/out/"
    os.symlink("/etc/passwd", out + "l-passwd")
    os.symlink("/root/.ssh/id_rsa", out + "l-host")
    os.mkfifo(out + "fifo")
    socket.socket(socket.AF_UNIX).bind(out + "sock")
    open(out + "bad\x07name", "w").write("x")
    try:
        context.artifacts.save("../../x", "escape")
        return "escaped"
    except ValueError:
        pass
    open(out + "keep.txt", "w").write("kept")
    try:
        for i in range(100000):
            open(out + "n-%06d" % i, "w").close()
    except OSError:
        pass
    if os.fork() == 0:
        os.setsid()
        with open(out + "grow.log", "ab") as f:
            while True:
                f.write(b"y" * 65536)
    time.sleep(0.1)
    return "done"
`

func TestHostileArtifactsThroughTheGateway(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		fast := config.DemoTenant()
		fast.ID = "fast"
		fast.Policy["isolation"] = []any{"jail", "process"}
		c.Tenants = append(c.Tenants, fast)
	}})
	tok := s.token("fast")
	for _, level := range []string{"jail", "process"} {
		t.Run(level, func(t *testing.T) {
			id := "hostile-" + level
			lim := stretchedLimits()
			lim["tmp_mb"], lim["artifacts"] = 16, 4
			r := s.execute(tok, map[string]any{"execution_id": id, "source": hostileArtifacts, "isolation": level, "limits": lim})
			if r.status != http.StatusOK {
				t.Fatalf("%d %s", r.status, r.body)
			}
			env := r.json(t)
			if env["status"] != "ok" || env["result"] != "done" {
				t.Fatalf("envelope %s", r.body)
			}
			arts, _ := env["artifacts"].([]any)
			if len(arts) != 4 {
				t.Fatalf("artifacts %v; want limits.artifacts (4)", arts)
			}
			tr, _ := env["truncated"].(map[string]any)
			reasons := map[string]string{}
			for _, d := range tr["artifacts"].([]any) {
				m := d.(map[string]any)
				reasons[m["name"].(string)] = m["reason"].(string)
			}
			for name, want := range map[string]string{"l-passwd": "a symbolic link", "l-host": "a symbolic link", "fifo": "a FIFO", "bad\x07name": "an invalid name"} {
				if !strings.HasPrefix(reasons[name], want) {
					t.Errorf("%q: %q, want %q", name, reasons[name], want)
				}
			}
			if n, _ := tr["artifacts_dropped"].(float64); n < 1000 {
				t.Errorf("artifacts_dropped %v; the tool left thousands of files", tr["artifacts_dropped"])
			}
			// What was collected is served; what was dropped is not.
			for _, a := range arts {
				name := a.(map[string]any)["name"].(string)
				if g := s.fetchArtifact(t, tok, id, name, ""); g.status != http.StatusOK {
					t.Errorf("GET %s: %d", name, g.status)
				}
			}
			for _, name := range []string{"l-passwd", "fifo", "sock"} {
				if g := s.fetchArtifact(t, tok, id, name, ""); g.status != http.StatusNotFound {
					t.Errorf("GET dropped %s: %d", name, g.status)
				}
			}
		})
	}
}
