package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/sandbox"
)

// Tool calls of a dispatched run (code mode) travel back to the gateway
// that owns the run, so executors hold no tool credentials and need no
// route to tool servers. The executor's remoteBridge RPUSHes each request
// on the run's bridge list; the gateway's await loop pops it, answers with
// the run's real bridge (grants, per-call policy, metering, the calls'
// record) and RPUSHes the answer on the request's own list, which the
// executor BLPOPs.

// Bridge bounds on the wire.
const (
	// maxBridgeRequestWire and maxBridgeAnswerWire bound the values (the sandbox caps
	// requests at 1 MiB + 4 KiB and answers at 8 MiB).
	maxBridgeRequestWire = 2 << 20
	maxBridgeAnswerWire  = 9 << 20
	// maxBridgeInflight bounds the requests of one run served at once.
	maxBridgeInflight = 16
	// bridgeKeyTTL expires what a dead side left behind.
	bridgeKeyTTL = 5 * time.Minute
	// bridgeCallTimeout bounds one call when the run's context has no
	// deadline.
	bridgeCallTimeout = 120 * time.Second
)

type bridgeRequest struct {
	N     uint64          `json:"n"`
	Op    string          `json:"op"` // search, describe, call
	Query string          `json:"query,omitempty"`
	Limit int             `json:"limit,omitempty"`
	Name  string          `json:"name,omitempty"`
	Args  json.RawMessage `json:"args,omitempty"`
	// FrameBytes is the size of the jail's request frame on the executor
	// (the gateway charges the run for it, sandbox.RequestBytes).
	FrameBytes int `json:"frame_bytes,omitempty"`
}

type bridgeAnswer struct {
	Tools  []sandbox.ToolInfo `json:"tools,omitempty"`
	Tool   *sandbox.ToolInfo  `json:"tool,omitempty"`
	Result json.RawMessage    `json:"result,omitempty"`
	Error  *sandbox.ToolError `json:"error,omitempty"`
}

// serveBridge answers one request of run runID with b (gateway side).
func (d *Dispatcher) serveBridge(ctx context.Context, b sandbox.Bridge, runID, raw string) {
	var req bridgeRequest
	if len(raw) > maxBridgeRequestWire || json.Unmarshal([]byte(raw), &req) != nil {
		d.log.Warn("dispatch: dropping a malformed bridge request", "run_id", runID, "bytes", len(raw))
		return // the executor's call times out: ToolUnavailable
	}
	ctx = sandbox.WithRequestBytes(ctx, max(len(raw), min(req.FrameBytes, maxBridgeRequestWire)))
	var ans bridgeAnswer
	var err error
	switch req.Op {
	case "search":
		ans.Tools, err = b.Search(ctx, req.Query, req.Limit)
	case "describe":
		var t sandbox.ToolInfo
		if t, err = b.Describe(ctx, req.Name); err == nil {
			ans.Tool = &t
		}
	case "call":
		ans.Result, err = b.Call(ctx, req.Name, req.Args)
	default:
		err = &sandbox.ToolError{Type: sandbox.ErrToolUnavailable, Message: "unknown bridge operation"}
	}
	if err != nil {
		var te *sandbox.ToolError
		if !errors.As(err, &te) {
			te = &sandbox.ToolError{Type: sandbox.ErrToolUnavailable, Message: "the tool bridge is unavailable"}
		}
		ans = bridgeAnswer{Error: te}
	}
	out, err := json.Marshal(ans)
	if err == nil && len(out) > maxBridgeAnswerWire {
		out, err = json.Marshal(bridgeAnswer{Error: &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: "the tool's answer is too large"}})
	}
	if err != nil {
		return
	}
	key := d.k.bridgeAnswer(runID, req.N)
	pipe := d.rdb.TxPipeline()
	pipe.RPush(ctx, key, out)
	pipe.Expire(ctx, key, bridgeKeyTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		d.log.Warn("dispatch: answering a bridge request", "run_id", runID, "err", err)
	}
}

// remoteBridge is a dispatched run's Bridge on the executor: every call is
// a request to the gateway that owns the run.
type remoteBridge struct {
	rdb   redis.UniversalClient
	k     keys
	runID string
	n     atomic.Uint64
}

var _ sandbox.Bridge = (*remoteBridge)(nil)

func (r *remoteBridge) Search(ctx context.Context, query string, limit int) ([]sandbox.ToolInfo, error) {
	a, err := r.ask(ctx, bridgeRequest{Op: "search", Query: query, Limit: limit})
	if err != nil {
		return nil, err
	}
	return a.Tools, nil
}

func (r *remoteBridge) Describe(ctx context.Context, name string) (sandbox.ToolInfo, error) {
	a, err := r.ask(ctx, bridgeRequest{Op: "describe", Name: name})
	if err != nil {
		return sandbox.ToolInfo{}, err
	}
	if a.Tool == nil {
		return sandbox.ToolInfo{}, &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: "the gateway answered without a tool"}
	}
	return *a.Tool, nil
}

func (r *remoteBridge) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	a, err := r.ask(ctx, bridgeRequest{Op: "call", Name: name, Args: args})
	if err != nil {
		return nil, err
	}
	return a.Result, nil
}

func (r *remoteBridge) ask(ctx context.Context, req bridgeRequest) (*bridgeAnswer, error) {
	req.N = r.n.Add(1)
	req.FrameBytes = sandbox.RequestBytes(ctx)
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding a bridge request: %w", err)
	}
	if len(b) > maxBridgeRequestWire {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: "the call's arguments are too large"}
	}
	key := r.k.bridge(r.runID)
	pipe := r.rdb.TxPipeline()
	pipe.RPush(ctx, key, b)
	pipe.Expire(ctx, key, bridgeKeyTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("sending a bridge request: %w", err)
	}
	wait := bridgeCallTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	kv, err := r.rdb.BLPop(ctx, max(wait, time.Second), r.k.bridgeAnswer(r.runID, req.N)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: "the gateway did not answer the tool call in time"}
	}
	if err != nil {
		return nil, fmt.Errorf("waiting for a bridge answer: %w", err)
	}
	if len(kv[1]) > maxBridgeAnswerWire {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: "the tool's answer is too large"}
	}
	var a bridgeAnswer
	if err := json.Unmarshal([]byte(kv[1]), &a); err != nil {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: "the gateway's answer is not valid"}
	}
	if a.Error != nil {
		return nil, a.Error
	}
	return &a, nil
}
