package toolbridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// RunInfo is what a Run needs to know about its run.
type RunInfo struct {
	TenantID   string
	Plan       string
	TenantData map[string]any // the tenant's policy data (input.tenant.data)
	Subject    string
	Roles      []string
	// DecisionID is the run's decision; Granted its decided tools (names
	// or globs over "<server>.<tool>").
	DecisionID string
	Granted    []string
}

// Run is the governed bridge of one run: a sandbox.Bridge and
// sandbox.ToolCallRecorder. Create it with Hub.NewRun; it lives as long as
// the run.
type Run struct {
	h       *Hub
	tt      *tenantTools // nil: the tenant has no tool servers
	info    RunInfo
	started time.Time
	slots   chan struct{} // MaxConcurrent
	// deciding is held (capacity 1) from reading counts to raising them:
	// one per-call decision of the run at a time, so each decision sees
	// every call allowed before it, in flight or done.
	deciding chan struct{}

	mu      sync.Mutex // guards the fields below
	index   int        // run requests so far
	lookups int        // search and describe requests so far
	// charged is the gateway CPU charged for the run's bridge requests
	// so far (charge.go).
	charged time.Duration
	// counts are the run's calls per tool that policy allowed, including
	// calls still in flight (raised together with the decision).
	counts   map[string]int
	bytesIn  int64
	bytesOut int64
	calls    []sandbox.ToolCall
	dropped  int // calls not kept in calls
}

// NewRun returns the bridge of one run of info.TenantID.
func (h *Hub) NewRun(info RunInfo) *Run {
	r := &Run{h: h, tt: h.current(context.Background(), info.TenantID, false), info: info, started: h.now(), counts: map[string]int{}}
	l := toolconfig.DefaultLimits
	if r.tt != nil {
		l = r.tt.limits
	}
	r.slots = make(chan struct{}, l.MaxConcurrent)
	r.deciding = make(chan struct{}, 1)
	return r
}

var (
	_ sandbox.Bridge           = (*Run)(nil)
	_ sandbox.ToolCallRecorder = (*Run)(nil)
)

func (r *Run) limits() toolconfig.Limits {
	if r.tt == nil {
		return toolconfig.DefaultLimits
	}
	return r.tt.limits
}

// Search lists the granted tools whose name or description match query.
// It counts against MaxLookups; its scan is measured and charged.
func (r *Run) Search(ctx context.Context, query string, limit int) ([]sandbox.ToolInfo, error) {
	if err := r.lookup(ctx, "search", len(query)); err != nil {
		return nil, err
	}
	r.h.opts.Metrics.lookup(r.info.TenantID, "search", nil)
	var out []sandbox.ToolInfo
	if r.tt == nil {
		return out, nil
	}
	var scanned time.Duration
	answer := 0
	for _, s := range r.tt.servers {
		if !serverMayMatch(r.info.Granted, s.cfg.Name) {
			continue
		}
		l, err := s.tools(ctx)
		if err != nil {
			continue // an unreachable server offers nothing to search
		}
		scanned += onThreadCPU(func() {
			for _, t := range l.tools {
				if len(out) >= limit {
					return
				}
				full := s.cfg.Name + "." + t.Name
				info := sandbox.ToolInfo{Name: full, Description: firstLine(t.Description)}
				if grantedTool(r.info.Granted, full) && sandbox.ToolMatches(query, info) {
					out = append(out, info)
					answer += len(info.Name) + len(info.Description)
				}
			}
		})
		if len(out) >= limit {
			break
		}
	}
	r.charge(scanned + perKiB(answer, RequestKiBCPU))
	return out, nil
}

// Describe returns a granted tool's description and input schema. It
// counts against MaxLookups.
func (r *Run) Describe(ctx context.Context, name string) (sandbox.ToolInfo, error) {
	if err := r.lookup(ctx, "describe", len(name)); err != nil {
		return sandbox.ToolInfo{}, err
	}
	_, t, err := r.resolve(ctx, name)
	r.h.opts.Metrics.lookup(r.info.TenantID, "describe", err)
	if err != nil {
		return sandbox.ToolInfo{}, err
	}
	r.charge(perKiB(len(t.Description)+len(t.Schema), RequestKiBCPU))
	return sandbox.ToolInfo{Name: name, Description: t.Description, InputSchema: t.Schema}, nil
}

// lookup counts and charges one search or describe request (size: its
// query or name, when the caller does not give the frame's size) and
// refuses it past MaxLookups. Like calls past MaxCalls, refused lookups
// stay counted.
func (r *Run) lookup(ctx context.Context, op string, size int) error {
	l := r.limits()
	cost := RequestCPU + perKiB(requestBytes(ctx, size), RequestKiBCPU)
	r.mu.Lock()
	r.charged += cost
	r.lookups++
	over := r.lookups > l.MaxLookups
	r.mu.Unlock()
	if !over {
		return nil
	}
	err := &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: fmt.Sprintf("the run's lookup limit (%d searches and describes) is reached", l.MaxLookups)}
	r.h.opts.Metrics.lookup(r.info.TenantID, op, err)
	return err
}

// resolve finds a granted tool, or a typed error.
func (r *Run) resolve(ctx context.Context, full string) (*server, *tool, error) {
	denied := &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: fmt.Sprintf("tool %q is not granted to this run", full)}
	srvName, name, ok := splitTool(full)
	if !ok || r.tt == nil || !grantedTool(r.info.Granted, full) {
		return nil, nil, denied
	}
	s := r.tt.byName[srvName]
	if s == nil || !allowed(s.cfg.Allow, name) {
		return nil, nil, denied
	}
	l, err := s.tools(ctx)
	if err != nil {
		return s, nil, s.unreachable(ctx, ctx, err).err
	}
	t := l.byName[name]
	if t == nil {
		return s, nil, &sandbox.ToolError{Type: sandbox.ErrToolUnavailable, Message: fmt.Sprintf("tool server %s offers no tool %q", srvName, name)}
	}
	return s, t, nil
}

// Call governs and makes one call: limits, grant, per-call policy, schema,
// then the server. Every call, allowed or not, is recorded.
func (r *Run) Call(ctx context.Context, full string, args json.RawMessage) (json.RawMessage, error) {
	start := r.h.now()
	ctx, span := r.h.tracer.Start(ctx, "tool.call")
	defer span.End()
	srvName, _, _ := splitTool(full)
	rec := sandbox.ToolCall{Tool: full, BytesIn: int64(len(args)), ArgsSHA256: digest(args)}
	if r.tt != nil && r.tt.byName[srvName] != nil {
		rec.Server = srvName
	}
	result, err := r.call(ctx, full, args, &rec)
	rec.MS = r.h.now().Sub(start).Milliseconds()
	rec.Outcome = outcome(err)
	var te *sandbox.ToolError
	if errors.As(err, &te) && rec.Reason == "" {
		rec.Reason = clip(te.Message, 512)
	}
	rec.BytesOut = int64(len(result))
	if r.tt != nil && r.tt.recordArgs && rec.Outcome != sandbox.ErrToolDenied {
		rec.Args = args
	}
	span.SetAttributes(
		attribute.String("execgate.tool", clip(full, 256)),
		attribute.String("execgate.tool.server", rec.Server),
		attribute.String("execgate.tool.outcome", rec.Outcome),
		attribute.String("execgate.tool.decision_id", rec.DecisionID),
		attribute.Int64("execgate.tool.bytes_in", rec.BytesIn),
		attribute.Int64("execgate.tool.bytes_out", rec.BytesOut),
	)
	if rec.Outcome != "ok" {
		span.SetStatus(codes.Error, rec.Outcome)
	}
	r.h.opts.Metrics.observe(r.info.TenantID, rec.Server, rec.Outcome, time.Duration(rec.MS)*time.Millisecond)
	r.mu.Lock()
	if len(r.calls) < r.limits().MaxCalls+maxExtraRecords {
		r.calls = append(r.calls, rec)
	} else {
		r.dropped++
	}
	r.mu.Unlock()
	return result, err
}

// outcome is a request's outcome as recorded: "ok", the bridge error type,
// or ToolUnavailable for an error of another kind.
func outcome(err error) string {
	var te *sandbox.ToolError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &te):
		return te.Type
	default:
		return sandbox.ErrToolUnavailable
	}
}

// maxExtraRecords are the denied calls past MaxCalls still recorded one by
// one (the rest are only counted).
const maxExtraRecords = 16

func (r *Run) call(ctx context.Context, full string, args json.RawMessage, rec *sandbox.ToolCall) (json.RawMessage, error) {
	l := r.limits()
	r.mu.Lock()
	r.charged += RequestCPU + perKiB(requestBytes(ctx, len(full)+len(args)), RequestKiBCPU)
	index := r.index
	r.index++
	if index >= l.MaxCalls {
		r.mu.Unlock()
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: fmt.Sprintf("the run's call limit (%d) is reached", l.MaxCalls)}
	}
	if int64(len(args)) > l.MaxArgsBytes {
		r.mu.Unlock()
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: fmt.Sprintf("the arguments are %d bytes, over the %d-byte cap", len(args), l.MaxArgsBytes)}
	}
	if r.bytesIn+int64(len(args)) > l.MaxBytesIn {
		r.mu.Unlock()
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: fmt.Sprintf("the run's arguments budget (%d bytes) is spent", l.MaxBytesIn)}
	}
	r.bytesIn += int64(len(args))
	r.mu.Unlock()

	s, t, err := r.resolve(ctx, full)
	if err != nil {
		return nil, err
	}
	if err := r.decide(ctx, full, len(args), index, rec); err != nil {
		return nil, err
	}

	if !bytes.HasPrefix(bytes.TrimSpace(args), []byte("{")) {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: "invalid arguments: must be a JSON object"}
	}
	if err := t.check(args); err != nil {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: clip("invalid arguments: "+err.Error(), 2048)}
	}

	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: "the run's deadline was reached waiting for a call slot"}
	}
	out := s.call(ctx, t.Name, args)
	<-r.slots
	r.charge(CallCPU + perKiB(out.received, ResultKiBCPU))
	if out.err != nil {
		return nil, out.err
	}
	r.mu.Lock()
	over := r.bytesOut+int64(len(out.result)) > l.MaxBytesOut
	if !over {
		r.bytesOut += int64(len(out.result))
	}
	r.mu.Unlock()
	if over {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: fmt.Sprintf("the run's results budget (%d bytes) is spent", l.MaxBytesOut)}
	}
	return out.result, nil
}

// decide asks the tool call policy about call index of full and, when it
// allows, counts the call in the same step: the decision and the count it
// raises are one critical section (deciding), so n calls sent at once under
// a limit of k let exactly k through, as n calls one after another do. A
// call the policy denies (or cannot decide) is not counted; an allowed call
// stays counted whatever happens to it next (an invalid argument, a server
// error), as it did when calls came one at a time.
func (r *Run) decide(ctx context.Context, full string, argsBytes, index int, rec *sandbox.ToolCall) error {
	select {
	case r.deciding <- struct{}{}:
	case <-ctx.Done():
		return &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: "the run's deadline was reached waiting for the call's decision"}
	}
	defer func() { <-r.deciding }()
	r.mu.Lock()
	counts := make(map[string]int, len(r.counts))
	for k, v := range r.counts {
		counts[k] = v
	}
	r.mu.Unlock()
	srvName, name, _ := splitTool(full)
	d, err := r.h.opts.Policy.DecideToolCall(ctx, policy.ToolCallInput{
		Tenant:  policy.TenantInput{ID: r.info.TenantID, Plan: r.info.Plan, Data: r.info.TenantData},
		Subject: policy.SubjectInput{Sub: r.info.Subject, Roles: r.info.Roles},
		Call: policy.CallInput{
			Tool: full, Server: srvName, Name: name, ArgsBytes: argsBytes, Index: index,
			ElapsedMS: r.h.now().Sub(r.started).Milliseconds(), DecisionID: r.info.DecisionID, Counts: counts,
		},
	})
	rec.DecisionID = d.ID
	if err != nil {
		r.h.log.Error("tool call policy error", "tenant_id", r.info.TenantID, "decision_id", d.ID, "error", err.Error())
		return &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: "the tool call policy could not decide (denied)"}
	}
	if !d.Allow {
		return &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: "denied by policy: " + strings.Join(d.Reasons, "; ")}
	}
	r.mu.Lock()
	r.counts[full]++
	r.mu.Unlock()
	return nil
}

// ToolCalls returns the calls recorded so far, in order.
func (r *Run) ToolCalls() []sandbox.ToolCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sandbox.ToolCall(nil), r.calls...)
}

// Dropped is how many calls were counted but not recorded one by one.
func (r *Run) Dropped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// check validates args against the tool's input schema (compiled on first
// use, with every remote or file reference refused).
func (t *tool) check(args json.RawMessage) error {
	if len(t.Schema) == 0 {
		return nil
	}
	t.once.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Schema))
		if err != nil {
			t.compErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.UseLoader(noLoader{})
		if err := c.AddResource("tool:///input.json", doc); err != nil {
			t.compErr = err
			return
		}
		t.validate, t.compErr = c.Compile("tool:///input.json")
	})
	if t.compErr != nil {
		return fmt.Errorf("the tool's input schema is unusable")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("not JSON")
	}
	return t.validate.Validate(inst)
}

// noLoader refuses every $ref outside the schema itself.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema references are not loaded (%s)", clip(url, 128))
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return clip(s, 200)
}
