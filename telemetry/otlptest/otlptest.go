// Package otlptest is an OTLP/HTTP receiver for tests: an httptest server
// that decodes protobuf ExportTraceServiceRequest and ExportLogsServiceRequest
// bodies (POST /v1/traces, /v1/logs) and keeps what it received, so tests can
// assert what an exporter configured by OTEL_EXPORTER_OTLP_ENDPOINT really sent.
package otlptest

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with its resource.
type Span struct {
	Resource *resourcepb.Resource
	Span     *tracepb.Span
}

// Log is one received log record with its resource.
type Log struct {
	Resource *resourcepb.Resource
	Record   *logspb.LogRecord
}

// Receiver is a running OTLP/HTTP receiver. Its zero value is not usable;
// call NewReceiver.
type Receiver struct {
	// URL is the base endpoint, for OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	mu     sync.Mutex // guards spans, logs, status
	spans  []Span
	logs   []Log
	status int // HTTP status to answer with; 200 unless SetStatus
}

// NewReceiver starts a receiver on loopback, closed at the end of the test.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{status: http.StatusOK}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.handleTraces)
	mux.HandleFunc("POST /v1/logs", r.handleLogs)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// SetStatus makes the receiver answer every later export with code (e.g.
// 400, which exporters do not retry).
func (r *Receiver) SetStatus(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = code
}

func (r *Receiver) read(w http.ResponseWriter, req *http.Request, msg proto.Message) bool {
	r.mu.Lock()
	status := r.status
	r.mu.Unlock()
	if status != http.StatusOK {
		http.Error(w, "refused by test", status)
		return false
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	if err := proto.Unmarshal(data, msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (r *Receiver) handleTraces(w http.ResponseWriter, req *http.Request) {
	var msg coltracepb.ExportTraceServiceRequest
	if !r.read(w, req, &msg) {
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Resource: rs.GetResource(), Span: s})
			}
		}
	}
	r.mu.Unlock()
	reply(w, &coltracepb.ExportTraceServiceResponse{})
}

func (r *Receiver) handleLogs(w http.ResponseWriter, req *http.Request) {
	var msg collogspb.ExportLogsServiceRequest
	if !r.read(w, req, &msg) {
		return
	}
	r.mu.Lock()
	for _, rl := range msg.GetResourceLogs() {
		for _, sl := range rl.GetScopeLogs() {
			for _, l := range sl.GetLogRecords() {
				r.logs = append(r.logs, Log{Resource: rl.GetResource(), Record: l})
			}
		}
	}
	r.mu.Unlock()
	reply(w, &collogspb.ExportLogsServiceResponse{})
}

func reply(w http.ResponseWriter, msg proto.Message) {
	data, err := proto.Marshal(msg)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(data)
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Logs returns the log records received so far.
func (r *Receiver) Logs() []Log {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Log(nil), r.logs...)
}

// WaitSpans polls until at least n spans arrived or the deadline passes,
// failing the test then.
func (r *Receiver) WaitSpans(t testing.TB, n int, timeout time.Duration) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if s := r.Spans(); len(s) >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("otlptest: %d spans after %s, want >= %d", len(r.Spans()), timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Attr returns the value of attribute key in kvs, and whether it exists.
func Attr(kvs []*commonpb.KeyValue, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue(), true
		}
	}
	return nil, false
}
