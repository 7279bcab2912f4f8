package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"unicode/utf8"
)

// The tool bridge: the jail's only door to host tools (code mode, DESIGN §14).
//
// Every jail gets one end of a unix socketpair as fd 5 (bridgeFD, see the fd
// contract in jail_linux.go); the runner keeps the other end and, from the
// hand-off until the jail is gone, serves it with the run's Bridge. Nothing
// but the socket crosses: no address, no credential, no path. The socket
// dies with the jail (EOF once every process of the jail has exited) and
// the serving goroutines end with it.
//
// Deno cannot open fd 5 (every permission is denied), so a Deno jail's
// requests travel as frames of kind frameBridge on its stdout (demux.go)
// and the answers on its stdin, which stays open after the request for
// that (stdioChannel). One serving loop (bridgeServer) serves either
// channel: the caps, the version check, pipelining by id, the concurrency
// cap and the run's accounting (its Bridge) are the same.
//
// Protocol (BridgeProtocolVersion), both directions: frames of a 4-byte
// big-endian length followed by that many bytes of JSON (on a Deno jail's
// stdout the request is the payload of a kind-3 frame instead).
//
//	jail → runner  {"v":1, "id":N, "op":"search", "query":str, "limit":int}
//	               {"v":1, "id":N, "op":"describe", "name":str}
//	               {"v":1, "id":N, "op":"run", "name":str, "args":any}
//	runner → jail  {"v":1, "id":N, "result":any}
//	               {"v":1, "id":N, "error":{"type":str, "message":str}}
//
// Requests may be pipelined (run_async): answers carry the request's id and
// may arrive in any order. A request frame over Limits.BridgeRequestBytes, a
// frame that is not JSON, or a request of another version is a protocol
// violation and ends the channel (the tool sees ToolUnavailable from then
// on); an answer over maxBridgeAnswer is replaced by a ToolFailed error.

// BridgeProtocolVersion is the version of the bridge protocol.
const BridgeProtocolVersion = 1

// Bridge limits on the runner side, whatever the Bridge does.
const (
	// maxBridgeRequest is the largest request frame read from the jail
	// (the args of one call plus the envelope of the request).
	maxBridgeRequest = 1<<20 + 4<<10
	// maxBridgeAnswer is the largest answer frame sent into the jail.
	maxBridgeAnswer = 8 << 20
	// maxBridgeInflight is how many requests of one run are served at
	// once; the channel is not read while that many are pending.
	maxBridgeInflight = 16
	// maxBridgeText bounds the query and names read from a request.
	maxBridgeText = 1024
)

// Bridge error types: what the tool catches (execgate_runtime exceptions of
// the same names).
const (
	ErrToolDenied      = "ToolDenied"      // not granted, or denied by the per-call policy or a limit
	ErrToolUnavailable = "ToolUnavailable" // the server cannot be reached, or the bridge is gone
	ErrToolTimeout     = "ToolTimeout"     // the call outlived its timeout or the run's deadline
	ErrToolFailed      = "ToolFailed"      // the server answered with an error, or an unusable result
)

// ToolError is a refused or failed bridge request, as the tool sees it.
// Message is shown to the tool: it never carries a credential or an
// upstream address.
type ToolError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e *ToolError) Error() string { return e.Type + ": " + e.Message }

// ToolInfo describes one tool the run may call. InputSchema is the tool's
// JSON Schema (describe only; search leaves it out).
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Bridge answers one run's tool requests. The runner calls it from several
// goroutines at once (at most maxBridgeInflight); ctx ends when the jail is
// gone or at the run's deadline. An error that is not a *ToolError reaches
// the tool as ToolUnavailable with a fixed message.
type Bridge interface {
	Search(ctx context.Context, query string, limit int) ([]ToolInfo, error)
	Describe(ctx context.Context, name string) (ToolInfo, error)
	Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error)
}

// ToolCall is one run request of a run, as recorded by its Bridge: what the
// envelope (tool, server, decision_id, ms, outcome) and the audit record
// (all of it) show.
type ToolCall struct {
	Tool       string `json:"tool"`
	Server     string `json:"server,omitempty"`
	DecisionID string `json:"decision_id,omitempty"`
	MS         int64  `json:"ms"`
	// Outcome is "ok" or a bridge error type (ToolDenied, ...).
	Outcome string `json:"outcome"`
	// Reason says why a call was denied or failed (bounded).
	Reason     string `json:"reason,omitempty"`
	BytesIn    int64  `json:"bytes_in"`
	BytesOut   int64  `json:"bytes_out"`
	ArgsSHA256 string `json:"args_sha256,omitempty"`
	// Args are the call's arguments, only when the tenant's audit policy
	// asks for them (record_args).
	Args json.RawMessage `json:"args,omitempty"`
}

// requestBytesKey carries the size of the request frame being served.
type requestBytesKey struct{}

// WithRequestBytes returns ctx saying that the request being served came
// in a frame of n bytes (what the jail sent): a Bridge charges its run for
// the bytes it was made to read (RequestBytes). The bridge server sets it
// for every request; the dispatcher carries it from an executor to the
// gateway that owns the run.
func WithRequestBytes(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, requestBytesKey{}, n)
}

// RequestBytes is the frame size WithRequestBytes put into ctx (0: not
// said).
func RequestBytes(ctx context.Context) int {
	n, _ := ctx.Value(requestBytesKey{}).(int)
	return n
}

// ToolCallRecorder is implemented by a Bridge that records its calls; the
// runner copies them into Result.ToolCalls once the jail is gone.
type ToolCallRecorder interface {
	ToolCalls() []ToolCall
}

// bridgeRequest is one request frame.
type bridgeRequest struct {
	V     int             `json:"v"`
	ID    int64           `json:"id"`
	Op    string          `json:"op"`
	Query string          `json:"query,omitempty"`
	Limit int             `json:"limit,omitempty"`
	Name  string          `json:"name,omitempty"`
	Args  json.RawMessage `json:"args,omitempty"`
}

// bridgeAnswer is one answer frame.
type bridgeAnswer struct {
	V      int             `json:"v"`
	ID     int64           `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ToolError      `json:"error,omitempty"`
}

// bridgeChannel carries one jail's bridge frames: the fd-5 socket
// (connChannel) or a Deno jail's stdout frames and stdin (stdioChannel).
type bridgeChannel interface {
	// next returns the next request frame (at most maxBridgeRequest
	// bytes). An error ends serving: io.EOF or net.ErrClosed when the jail
	// or the runner closed the channel, anything else a protocol violation.
	next() ([]byte, error)
	// send writes one answer frame (the server writes one at a time).
	send(b []byte) error
	// close ends the channel: a pending next returns, a pending send
	// fails, and the jail reads EOF (ToolUnavailable from then on).
	close()
}

// connChannel is the bridge over the fd-5 socket (Python jails).
type connChannel struct{ conn net.Conn }

func (c connChannel) next() ([]byte, error) { return readFrame(c.conn, maxBridgeRequest) }
func (c connChannel) send(b []byte) error   { return writeFrame(c.conn, b) }
func (c connChannel) close()                { c.conn.Close() }

// bridgeServer serves one jail's bridge channel.
type bridgeServer struct {
	ch     bridgeChannel
	bridge Bridge
	log    *slog.Logger
	cancel context.CancelFunc

	wmu  sync.Mutex // guards ch.send (one frame at a time)
	reqs sync.WaitGroup
	done chan struct{} // closed when the read loop has ended
}

// serveBridge serves ch with b until the jail closes its end or stop is
// called. ctx bounds every request (the run's deadline).
func serveBridge(ctx context.Context, ch bridgeChannel, b Bridge, log *slog.Logger) *bridgeServer {
	ctx, cancel := context.WithCancel(ctx)
	s := &bridgeServer{ch: ch, bridge: b, log: log, cancel: cancel, done: make(chan struct{})}
	go s.loop(ctx)
	return s
}

// stop ends serving: pending requests are cancelled, the channel closed.
// It returns once every serving goroutine is gone.
func (s *bridgeServer) stop() {
	s.cancel()
	s.ch.close()
	<-s.done
	s.reqs.Wait()
}

func (s *bridgeServer) loop(ctx context.Context) {
	defer close(s.done)
	defer s.ch.close() // the jail sees EOF: ToolUnavailable from then on
	slots := make(chan struct{}, maxBridgeInflight)
	for {
		frame, err := s.ch.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				s.log.Debug("tool bridge closed", "error", err.Error())
			}
			return
		}
		var req bridgeRequest
		if err := json.Unmarshal(frame, &req); err != nil || req.V != BridgeProtocolVersion {
			// Not this protocol: answer once (id 0), then end the channel.
			msg := fmt.Sprintf("the bridge speaks protocol %d; the request is not a version %d frame", BridgeProtocolVersion, BridgeProtocolVersion)
			s.answer(bridgeAnswer{V: BridgeProtocolVersion, ID: req.ID, Error: &ToolError{Type: ErrToolUnavailable, Message: msg}})
			s.ch.close()
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		s.reqs.Add(1)
		rctx := WithRequestBytes(ctx, len(frame))
		go func() {
			defer func() { <-slots; s.reqs.Done() }()
			s.answer(s.handle(rctx, req))
		}()
	}
}

// handle answers one request.
func (s *bridgeServer) handle(ctx context.Context, req bridgeRequest) bridgeAnswer {
	a := bridgeAnswer{V: BridgeProtocolVersion, ID: req.ID}
	var result any
	var err error
	switch req.Op {
	case "search":
		limit := req.Limit
		if limit <= 0 || limit > 100 {
			limit = 100
		}
		var tools []ToolInfo
		tools, err = s.bridge.Search(ctx, clipText(req.Query), limit)
		if tools == nil {
			tools = []ToolInfo{}
		}
		result = tools
	case "describe":
		result, err = s.bridge.Describe(ctx, clipText(req.Name))
	case "run":
		args := req.Args
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		var raw json.RawMessage
		raw, err = s.bridge.Call(ctx, clipText(req.Name), args)
		if raw == nil {
			raw = nullJSON
		}
		result = raw
	default:
		err = &ToolError{Type: ErrToolFailed, Message: fmt.Sprintf("unknown bridge operation %q", clipText(req.Op))}
	}
	if err != nil {
		var te *ToolError
		if !errors.As(err, &te) {
			s.log.Warn("tool bridge request failed", "op", clipText(req.Op), "error", err.Error())
			te = &ToolError{Type: ErrToolUnavailable, Message: "the tool bridge could not answer"}
		}
		a.Error = te
		return a
	}
	raw, err := json.Marshal(result)
	if err != nil {
		a.Error = &ToolError{Type: ErrToolFailed, Message: "the result could not be encoded"}
		return a
	}
	a.Result = raw
	return a
}

// answer writes one frame; an answer too large for the jail becomes a
// ToolFailed error.
func (s *bridgeServer) answer(a bridgeAnswer) {
	b, err := json.Marshal(a)
	if err != nil || len(b) > maxBridgeAnswer {
		b, _ = json.Marshal(bridgeAnswer{V: a.V, ID: a.ID, Error: &ToolError{Type: ErrToolFailed,
			Message: fmt.Sprintf("the answer is over the bridge's %d-byte cap", maxBridgeAnswer)}})
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.ch.send(b) // a jail that went away reads nothing more
}

// readFrame reads one length-prefixed frame of at most max bytes.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("bridge frame of %d bytes is over the %d-byte cap", n, max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// writeFrame writes b as one frame.
func writeFrame(w io.Writer, b []byte) error {
	frame := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[4:], b)
	_, err := w.Write(frame)
	return err
}

// clipText bounds a string read from the jail.
func clipText(s string) string {
	if len(s) <= maxBridgeText {
		return s
	}
	s = s[:maxBridgeText]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// noBridge answers a run that was granted no tools.
type noBridge struct{}

func (noBridge) Search(context.Context, string, int) ([]ToolInfo, error) { return nil, nil }
func (noBridge) Describe(_ context.Context, name string) (ToolInfo, error) {
	return ToolInfo{}, &ToolError{Type: ErrToolDenied, Message: fmt.Sprintf("tool %q is not granted to this run (no host tools are available to it)", name)}
}
func (noBridge) Call(_ context.Context, name string, _ json.RawMessage) (json.RawMessage, error) {
	return nil, &ToolError{Type: ErrToolDenied, Message: fmt.Sprintf("tool %q is not granted to this run (no host tools are available to it)", name)}
}

var _ Bridge = noBridge{}
