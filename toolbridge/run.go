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

	mu       sync.Mutex // guards the fields below
	index    int        // run requests so far
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
func (r *Run) Search(ctx context.Context, query string, limit int) ([]sandbox.ToolInfo, error) {
	var out []sandbox.ToolInfo
	if r.tt == nil {
		return out, nil
	}
	for _, s := range r.tt.servers {
		if !serverMayMatch(r.info.Granted, s.cfg.Name) {
			continue
		}
		l, err := s.tools(ctx)
		if err != nil {
			continue // an unreachable server offers nothing to search
		}
		for _, t := range l.tools {
			full := s.cfg.Name + "." + t.Name
			info := sandbox.ToolInfo{Name: full, Description: firstLine(t.Description)}
			if grantedTool(r.info.Granted, full) && sandbox.ToolMatches(query, info) {
				out = append(out, info)
				if len(out) >= limit {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// Describe returns a granted tool's description and input schema.
func (r *Run) Describe(ctx context.Context, name string) (sandbox.ToolInfo, error) {
	_, t, err := r.resolve(ctx, name)
	if err != nil {
		return sandbox.ToolInfo{}, err
	}
	return sandbox.ToolInfo{Name: name, Description: t.Description, InputSchema: t.Schema}, nil
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
	rec.Outcome = "ok"
	var te *sandbox.ToolError
	if errors.As(err, &te) {
		rec.Outcome = te.Type
		if rec.Reason == "" {
			rec.Reason = clip(te.Message, 512)
		}
	} else if err != nil {
		rec.Outcome = sandbox.ErrToolUnavailable
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

// maxExtraRecords are the denied calls past MaxCalls still recorded one by
// one (the rest are only counted).
const maxExtraRecords = 16

func (r *Run) call(ctx context.Context, full string, args json.RawMessage, rec *sandbox.ToolCall) (json.RawMessage, error) {
	l := r.limits()
	r.mu.Lock()
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
	counts := make(map[string]int, len(r.counts))
	for k, v := range r.counts {
		counts[k] = v
	}
	r.mu.Unlock()

	s, t, err := r.resolve(ctx, full)
	if err != nil {
		return nil, err
	}
	srvName, name, _ := splitTool(full)
	d, err := r.h.opts.Policy.DecideToolCall(ctx, policy.ToolCallInput{
		Tenant:  policy.TenantInput{ID: r.info.TenantID, Plan: r.info.Plan, Data: r.info.TenantData},
		Subject: policy.SubjectInput{Sub: r.info.Subject, Roles: r.info.Roles},
		Call: policy.CallInput{
			Tool: full, Server: srvName, Name: name, ArgsBytes: len(args), Index: index,
			ElapsedMS: r.h.now().Sub(r.started).Milliseconds(), DecisionID: r.info.DecisionID, Counts: counts,
		},
	})
	rec.DecisionID = d.ID
	if err != nil {
		r.h.log.Error("tool call policy error", "tenant_id", r.info.TenantID, "decision_id", d.ID, "error", err.Error())
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: "the tool call policy could not decide (denied)"}
	}
	if !d.Allow {
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: "denied by policy: " + strings.Join(d.Reasons, "; ")}
	}
	r.mu.Lock()
	r.counts[full]++
	r.mu.Unlock()

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
	out := s.call(ctx, name, args)
	<-r.slots
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
