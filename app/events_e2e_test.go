package app_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseEvent is one Server-Sent Event as read off the wire.
type sseEvent struct {
	id, kind string
	data     []byte
}

// sseReader reads the events of an open response.
type sseReader struct {
	t  *testing.T
	br *bufio.Reader
}

// next returns the next event (false at the end of the stream).
func (r *sseReader) next() (sseEvent, bool) {
	r.t.Helper()
	var e sseEvent
	for {
		line, err := r.br.ReadString('\n')
		if err == io.EOF && line == "" {
			return e, false
		}
		if err != nil && err != io.EOF {
			r.t.Fatalf("reading the event stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && e.kind != "":
			return e, true
		case strings.HasPrefix(line, "event: "):
			e.kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			e.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			e.data = append(e.data, strings.TrimPrefix(line, "data: ")...)
		}
	}
}

// openEvents sends a request asking for Server-Sent Events.
func (s *server) openEvents(method, path, token, body string) (*http.Response, *sseReader) {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.app.URL()+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("%s %s: %d %s %s", method, path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return resp, &sseReader{t: s.t, br: bufio.NewReader(resp.Body)}
}

// readRun reads a run's events to the end, calling first at its first
// stdout chunk; it returns stdout, the log events and the envelope.
func readRun(t *testing.T, r *sseReader, first func()) (stdout string, logs int, env map[string]any) {
	t.Helper()
	for {
		e, ok := r.next()
		if !ok {
			if env == nil {
				t.Fatal("the stream ended without an envelope")
			}
			return stdout, logs, env
		}
		if env != nil {
			t.Fatalf("an event after the envelope: %s", e.kind)
		}
		switch e.kind {
		case "stdout":
			var chunk struct{ Text string }
			if err := json.Unmarshal(e.data, &chunk); err != nil {
				t.Fatalf("stdout data %q: %v", e.data, err)
			}
			if stdout == "" && first != nil {
				first()
			}
			stdout += chunk.Text
		case "log":
			logs++
		case "envelope":
			if err := json.Unmarshal(e.data, &env); err != nil {
				t.Fatalf("envelope data %q: %v", e.data, err)
			}
		case "stderr":
		default:
			t.Fatalf("unexpected event %q %s", e.kind, e.data)
		}
	}
}

const twoLines = "import time\ndef run(args, context):\n    print('one')\n    time.sleep(1)\n    print('two')\n    context.log('logged')\n    return 7\n"

// Issue #15 §4: GET /v1/executions/{id}/events delivers the first line of
// a real jailed run while the run still runs (the execution is still
// "running" when it arrives), then the rest, the log line and the envelope.
func TestAnAsyncRunsOutputArrivesWhileItRuns(t *testing.T) {
	s := start(t, setup{})
	demo := s.token("demo")
	if r := s.do(http.MethodPost, "/v1/executions", demo, asyncBody("live", twoLines, 10000)); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	_, events := s.openEvents(http.MethodGet, "/v1/executions/live/events", demo, "")
	stdout, logs, env := readRun(t, events, func() {
		if st := s.do(http.MethodGet, "/v1/executions/live", demo, nil).json(t)["status"]; st != "running" {
			t.Fatalf("the first chunk arrived when the execution was %v", st)
		}
	})
	if stdout != "one\ntwo\n" || logs != 1 || env["status"] != "ok" || env["result"] != 7.0 || env["execution_id"] != "live" {
		t.Fatalf("stdout %q, %d logs, envelope %v", stdout, logs, env)
	}
	// Once done, the stream is the end only: the log line and the envelope.
	_, again := s.openEvents(http.MethodGet, "/v1/executions/live/events", demo, "")
	if stdout, logs, env := readRun(t, again, nil); stdout != "" || logs != 1 || env["status"] != "ok" {
		t.Fatalf("after the end: stdout %q, %d logs, envelope %v", stdout, logs, env)
	}
	// Another tenant: 404 before any stream.
	if r := s.do(http.MethodGet, "/v1/executions/live/events", s.token("acme"), nil); r.status != http.StatusNotFound {
		t.Fatalf("acme following demo's run: %d %s", r.status, r.body)
	}
}

// Issue #15 §4: POST /v1/execute with Accept: text/event-stream streams a
// synchronous run: its first line arrives before the run is recorded
// (the audit record is written at its end), for Python and JavaScript.
func TestASyncRunStreamsItsOutputWhenAskedTo(t *testing.T) {
	s := start(t, setup{})
	demo := s.token("demo")
	js := "export async function run(args, context) {\n  console.log('one');\n  await new Promise((r) => setTimeout(r, 1000));\n  console.log('two');\n  context.log('logged');\n  return 7;\n}\n"
	for _, tc := range []struct{ name, body string }{
		{"python", asyncBody("sync-py", twoLines, 10000)},
		{"javascript", `{"execution_id":"sync-js","language":"javascript","source":` + strconvQuote(js) + `,"limits":{"timeout_ms":10000}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "sync-py"
			if tc.name == "javascript" {
				id = "sync-js"
			}
			resp, events := s.openEvents(http.MethodPost, "/v1/execute", demo, tc.body)
			if resp.Header.Get("X-Execution-Id") != id {
				t.Fatalf("X-Execution-Id = %q", resp.Header.Get("X-Execution-Id"))
			}
			start := time.Now()
			stdout, logs, env := readRun(t, events, func() {
				if recs := s.auditOf(id); len(recs) != 0 {
					t.Fatalf("the first chunk arrived after the run was recorded (%v)", time.Since(start))
				}
			})
			if stdout != "one\ntwo\n" || logs != 1 || env["status"] != "ok" || env["result"] != 7.0 {
				t.Fatalf("stdout %q, %d logs, envelope %v", stdout, logs, env)
			}
			if recs := s.auditOf(id); len(recs) != 1 {
				t.Fatalf("audit records: %v", recs)
			}
		})
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
