package dispatch

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Input files and stdin travel with the signed job, artifacts come back
// with the signed reply (issue #24): through a gateway without nsjail and
// a real executor, over a real Redis, sync and async, at both levels; the
// gateway keeps the artifacts in Redis and serves them. (The reply is
// signed as a whole: split_hostile_e2e_test.go shows forged and altered
// replies refused.)
func TestSplitRunsCarryFilesStdinAndArtifacts(t *testing.T) {
	e := newSplitEnv(t)
	e.policyExtra = ", isolation: [jail, process]"
	e.startGateway()
	e.startExecutor("ex-files")
	waitFor(t, 30*time.Second, "the executor's announcement", func() bool {
		code, _ := e.readyz()
		return code == http.StatusOK
	})
	src := `import sys
def run(args, context):
    data = open("in/data.txt").read()
    open("/workspace/out/echo.txt", "w").write(data + "|" + sys.stdin.read())
    context.artifacts.save("big.bin", bytes(200000), mime="application/x-zeros")
    return len(data)
`
	big := sha256.Sum256(make([]byte, 200000))
	for _, level := range []string{"jail", "process"} {
		for _, mode := range []string{"sync", "async"} {
			t.Run(level+" "+mode, func(t *testing.T) {
				id := "split-files-" + level + "-" + mode
				body := map[string]any{"execution_id": id, "source": src, "isolation": level, "stdin": "piped",
					"files": []map[string]any{{"path": "in/data.txt", "content": base64.StdEncoding.EncodeToString([]byte("hello")), "encoding": "base64"}}}
				run := e.execute
				if mode == "async" {
					run = e.executeAsync
				}
				code, env, err := run(body)
				if err != nil || code != http.StatusOK || env.Status != "ok" || string(env.Result) != "5" {
					t.Fatalf("%d %+v %v", code, env, err)
				}
				raw := e.getRaw(t, "/v1/executions/"+id+"/artifacts/echo.txt")
				if raw.status != http.StatusOK || string(raw.body) != "hello|piped" || raw.header.Get("Content-Type") != "text/plain" {
					t.Fatalf("GET echo.txt: %d %q %q", raw.status, raw.header.Get("Content-Type"), raw.body)
				}
				raw = e.getRaw(t, "/v1/executions/"+id+"/artifacts/big.bin")
				sum := sha256.Sum256(raw.body)
				if raw.status != http.StatusOK || sum != big || raw.header.Get("Content-Type") != "application/x-zeros" {
					t.Fatalf("GET big.bin: %d %q %d bytes", raw.status, raw.header.Get("Content-Type"), len(raw.body))
				}
			})
		}
	}
	// The envelope lists them; the small one is inline.
	_, env := e.executeRaw(t, map[string]any{"execution_id": "split-files-list", "source": src,
		"files": []map[string]any{{"path": "in/data.txt", "content": "x"}}})
	var got struct {
		Artifacts []struct {
			Name   string  `json:"name"`
			Bytes  int64   `json:"bytes"`
			SHA256 string  `json:"sha256"`
			Base64 *string `json:"base64"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(env, &got); err != nil || len(got.Artifacts) != 2 {
		t.Fatalf("envelope %s", env)
	}
	if a := got.Artifacts[0]; a.Name != "big.bin" || a.Bytes != 200000 || a.SHA256 != hex.EncodeToString(big[:]) || a.Base64 != nil {
		t.Errorf("big.bin listed as %+v", a)
	}
	if a := got.Artifacts[1]; a.Name != "echo.txt" || a.Base64 == nil || *a.Base64 != base64.StdEncoding.EncodeToString([]byte("x|")) {
		t.Errorf("echo.txt listed as %+v", a)
	}
}

type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

// getRaw GETs path on the gateway as the test tenant.
func (e *splitEnv) getRaw(t *testing.T, path string) rawResponse {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.gwURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResponse{resp.StatusCode, resp.Header, b}
}

// executeRaw is execute returning the raw envelope.
func (e *splitEnv) executeRaw(t *testing.T, body map[string]any) (int, []byte) {
	t.Helper()
	body["tenant_id"] = splitTenant
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.gwURL+"/v1/execute", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}
