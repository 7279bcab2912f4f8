package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
// executor BLPOPs. Requests and answers are signed frames of the run
// (frames.go): a request the gateway did not get from the executor it
// confirmed, or got before, is refused and never served.

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
	frameHead                 // Seq numbers the run's requests from 1
	Op        string          `json:"op"` // search, describe, call
	Query     string          `json:"query,omitempty"`
	Limit     int             `json:"limit,omitempty"`
	Name      string          `json:"name,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
	// FrameBytes is the size of the jail's request frame on the executor
	// (the gateway charges the run for it, sandbox.RequestBytes); wireBytes
	// is the size of the value read from the run's list (gateway side).
	FrameBytes int `json:"frame_bytes,omitempty"`
	wireBytes  int
}

type bridgeAnswer struct {
	frameHead                    // Seq is the request's
	Tools     []sandbox.ToolInfo `json:"tools,omitempty"`
	Tool      *sandbox.ToolInfo  `json:"tool,omitempty"`
	Result    json.RawMessage    `json:"result,omitempty"`
	Error     *sandbox.ToolError `json:"error,omitempty"`
}

// openBridgeRequest verifies one value of the run's bridge list: signed
// under the run's key by the executor the gateway confirmed, with a
// sequence number not seen before (gateway side, the await loop).
func (w *watch) openBridgeRequest(raw string) (bridgeRequest, error) {
	var req bridgeRequest
	if err := openFrame(w.sig, domainBridgeReq, raw, maxBridgeRequestWire, &req); err != nil {
		return req, err
	}
	if err := req.check(w.runID, w.executor); err != nil {
		return req, err
	}
	req.wireBytes = len(raw)
	return req, w.bridgeSeq.take(req.Seq)
}

// serveBridge answers one verified request of the run with b (gateway
// side).
func (d *Dispatcher) serveBridge(ctx context.Context, b sandbox.Bridge, sig signer, req bridgeRequest) {
	ctx = sandbox.WithRequestBytes(ctx, max(req.wireBytes, min(req.FrameBytes, maxBridgeRequestWire)))
	ans := bridgeAnswer{frameHead: req.frameHead}
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
		ans = bridgeAnswer{frameHead: req.frameHead, Error: te}
	}
	out, err := sealFrame(sig, domainBridgeAnswer, ans)
	if err == nil && len(out) > maxBridgeAnswerWire {
		out, err = sealFrame(sig, domainBridgeAnswer, bridgeAnswer{frameHead: req.frameHead,
			Error: &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: "the tool's answer is too large"}})
	}
	if err != nil {
		return
	}
	if err := push(ctx, d.rdb, d.k.bridgeAnswer(req.RunID, req.Seq), out, bridgeKeyTTL); err != nil {
		d.log.Warn("dispatch: answering a bridge request", "run_id", req.RunID, "err", err)
	}
}

// remoteBridge is a dispatched run's Bridge on the executor: every call is
// a request to the gateway that owns the run.
type remoteBridge struct {
	rdb      redis.UniversalClient
	k        keys
	sig      signer // the run's
	runID    string
	executor string
	log      *slog.Logger
	n        atomic.Uint64
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
	req.frameHead = frameHead{RunID: r.runID, Executor: r.executor, Seq: r.n.Add(1)}
	req.FrameBytes = sandbox.RequestBytes(ctx)
	b, err := sealFrame(r.sig, domainBridgeReq, req)
	if err != nil {
		return nil, err
	}
	if len(b) > maxBridgeRequestWire {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: "the call's arguments are too large"}
	}
	if err := push(ctx, r.rdb, r.k.bridge(r.runID), b, bridgeKeyTTL); err != nil {
		return nil, fmt.Errorf("sending a bridge request: %w", err)
	}
	deadline := time.Now().Add(bridgeCallTimeout)
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	for {
		// A value that does not verify is dropped and the wait goes on:
		// only the gateway's signed answer to this request counts.
		kv, err := r.rdb.BLPop(ctx, max(time.Until(deadline), time.Second), r.k.bridgeAnswer(r.runID, req.Seq)).Result()
		if errors.Is(err, redis.Nil) {
			return nil, &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: "the gateway did not answer the tool call in time"}
		}
		if err != nil {
			return nil, fmt.Errorf("waiting for a bridge answer: %w", err)
		}
		var a bridgeAnswer
		err = openFrame(r.sig, domainBridgeAnswer, kv[1], maxBridgeAnswerWire, &a)
		if err == nil {
			err = a.check(r.runID, r.executor)
		}
		if err == nil && a.Seq != req.Seq {
			err = errors.New("answer to another request")
		}
		if err == nil {
			if a.Error != nil {
				return nil, a.Error
			}
			return &a, nil
		}
		recordRefusal(ctx, r.rdb, r.k, r.log, r.runID, "executor", r.executor, "bridge answer", err)
		if time.Now().After(deadline) {
			return nil, &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: "the gateway did not answer the tool call in time"}
		}
	}
}
