package mcpserver

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
)

// The tools' behaviour through the real flow, sandbox and gateway is
// app/mcp_test.go's; these are the package's own pure parts.

func TestARequestWithoutAnAuthenticatedCallerIsRefusedBeforeAnyTool(t *testing.T) {
	s := New(decode.Caps{Body: 1 << 20}, Deps{}) // no Flow: a tool call would panic
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_python","arguments":{"source":"x"}}}`
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer anything")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("status = %d, want 401: %s", w.Code, w.Body)
	}
}

func TestToolArgumentsBecomeAnExecuteBodyWithTheToolsLanguage(t *testing.T) {
	s := &Server{caps: decode.Caps{Body: 64}}
	tests := []struct {
		name    string
		args    string
		want    string // the body, or "" for a refusal
		status  int
		message string
	}{
		{"the language is the tool's", `{"source":"x"}`, `{"language":"javascript","source":"x"}`, 0, ""},
		{"arguments that are no object", `[1]`, "", http.StatusBadRequest, "arguments: must be a JSON object"},
		{"null arguments", `null`, "", http.StatusBadRequest, "arguments: must be a JSON object"},
		{"a language of the caller's", `{"source":"x","language":"python"}`, "", http.StatusBadRequest, "language: is set by the tool (execute_javascript)"},
		{"arguments over the body cap", `{"source":"` + strings.Repeat("x", 64) + `"}`, "", http.StatusRequestEntityTooLarge, "arguments: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := s.mcpExecuteBody(json.RawMessage(tt.args), "javascript")
			if tt.want != "" {
				if err != nil || string(body) != tt.want {
					t.Fatalf("body = %s, %v; want %s", body, err, tt.want)
				}
				return
			}
			var e *execution.Error
			if !errors.As(err, &e) || e.Status != tt.status || !strings.HasPrefix(e.Message, tt.message) {
				t.Fatalf("err = %v, want %d %q…", err, tt.status, tt.message)
			}
		})
	}
}

func TestTheTextPartSaysWhatTheEnvelopeSays(t *testing.T) {
	ok := envelopeText(&execution.Envelope{ExecutionID: "e1", Status: "ok", Result: json.RawMessage(`{"a":1}`), Stdout: "hi\n"}, 0)
	if want := "execution e1: ok\nresult: {\"a\":1}\nstdout:\nhi"; ok != want {
		t.Errorf("ok text = %q, want %q", ok, want)
	}
	refused := envelopeText(&execution.Envelope{ExecutionID: "e2", Status: "error",
		Error: &execution.ErrorBody{Type: "QuotaExceeded", Message: "slow down", Reasons: []string{"r1"}}}, 1500*time.Millisecond)
	if want := "execution e2: error\nQuotaExceeded: slow down\n  - r1\nretry after 2 s"; refused != want {
		t.Errorf("refusal text = %q, want %q", refused, want)
	}
}
