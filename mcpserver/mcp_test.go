package mcpserver

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

func TestArtifactsBecomeImageContentAndNamesInTheText(t *testing.T) {
	b64 := func(s string) *string { e := base64.StdEncoding.EncodeToString([]byte(s)); return &e }
	png := "\x89PNG\r\n\x1a\nrest"
	arts := []execution.EnvelopeArtifact{
		{Name: "chart.png", Bytes: int64(len(png)), MIME: "image/png", Base64: b64(png)},
		{Name: "big.png", Bytes: 1 << 20, MIME: "image/png"},
		{Name: "liar.png", Bytes: 4, MIME: "image/png", Base64: b64("text")},
		{Name: "vector.svg", Bytes: 5, MIME: "image/svg+xml", Base64: b64("<svg>")},
		{Name: "photo.webp", Bytes: 12, MIME: "image/webp", Base64: b64("RIFF\x04\x00\x00\x00WEBP")},
		{Name: "data.csv", Bytes: 4, MIME: "text/csv", Base64: b64("a,b\n")},
	}
	for i := range 40 {
		arts = append(arts, execution.EnvelopeArtifact{Name: fmt.Sprintf("n%02d.txt", i), Bytes: 1, MIME: "text/plain"})
	}
	env := &execution.Envelope{ExecutionID: "e1", Status: "ok", Artifacts: arts}
	env.Truncated.ArtifactsDropped = 3
	images, text := artifactContent(env)
	if len(images) != 2 {
		t.Fatalf("%d images, want chart.png and photo.webp", len(images))
	}
	if img := images[0].(*mcp.ImageContent); string(img.Data) != png || img.MIMEType != "image/png" {
		t.Errorf("image 0 = %q %s", img.Data, img.MIMEType)
	}
	if img := images[1].(*mcp.ImageContent); img.MIMEType != "image/webp" {
		t.Errorf("image 1 is %s", img.MIMEType)
	}
	for _, want := range []string{
		"artifacts (46; each: GET /v1/executions/e1/artifacts/{name}):",
		"chart.png (12 bytes, image/png): shown as an image",
		"big.png (1048576 bytes, image/png): too large to carry inline",
		"liar.png (4 bytes, image/png): its bytes are not a PNG image: not shown",
		"vector.svg (5 bytes, image/svg+xml): not sent as an image",
		"\n  data.csv (4 bytes, text/csv)\n",
		"n25.txt", "and 14 more (listed in the envelope)",
		"3 files of /workspace/out were not collected",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "n26.txt") {
		t.Errorf("text names more than %d artifacts:\n%s", maxArtifactLines, text)
	}
	if images, text := artifactContent(&execution.Envelope{ExecutionID: "e2"}); images != nil || text != "" {
		t.Errorf("no artifacts: %v %q", images, text)
	}
}
