package execution

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// The flow is transport-free: no Gin, and of net/http only the status
// codes the contract gives each refusal. A second transport (MCP, the
// async API) must be able to call it without an HTTP request.
func TestTheFlowKnowsNoHTTPRequests(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(path, "gin-gonic") || strings.HasSuffix(path, "/otelgin") || path == "net/http/httptest" {
				t.Errorf("%s imports %s: the flow must not know its transport", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "http" && !strings.HasPrefix(sel.Sel.Name, "Status") {
				t.Errorf("%s: uses http.%s; the flow takes only status codes from net/http", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
		checked++
	}
	if checked < 5 {
		t.Fatalf("checked %d files; the glob found the wrong directory", checked)
	}
}

func TestRefusalGivesEachErrorItsStatusAndType(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		typ        string
		retryAfter time.Duration
		expected   bool // a 4xx, or a 5xx describing the host, not a bug
	}{
		{name: "a classified error passes through", err: fmt.Errorf("decoding: %w", BadRequest("source", "is required")), status: 400, typ: TypeBadRequest, expected: true},
		{name: "a tenant the caller may not use", err: &tenancy.ForbiddenError{Reason: "no"}, status: 403, typ: TypeForbidden, expected: true},
		{name: "a policy deny", err: Denied(nil), status: 403, typ: TypePolicyDenied, expected: true},
		{name: "a policy that failed", err: fmt.Errorf("%w: %w", ErrPolicy, errors.New("undefined")), status: 500, typ: TypePolicyError},
		{name: "a rate quota", err: &quota.ExceededError{Kind: quota.KindRate, RetryAfter: 3 * time.Second}, status: 429, typ: TypeQuotaExceeded, retryAfter: 3 * time.Second, expected: true},
		{name: "a full dispatch queue", err: &quota.ExceededError{Kind: quota.KindQueued, RetryAfter: time.Second, Limit: 2}, status: 429, typ: TypeQuotaExceeded, retryAfter: time.Second, expected: true},
		{name: "a spent budget", err: &quota.ExceededError{Kind: quota.KindBudget, RetryAfter: time.Hour}, status: 429, typ: TypeBudgetExhausted, retryAfter: time.Hour, expected: true},
		{name: "a dropped response", err: &ResultExpiredError{Outcome: "ok"}, status: 409, typ: TypeResultExpired, expected: true},
		{name: "too many claims", err: &ClaimsExhaustedError{Max: 5, RetryAfter: time.Minute}, status: 429, typ: TypeQuotaExceeded, retryAfter: time.Minute, expected: true},
		{name: "the quota backend down", err: fmt.Errorf("admit: %w", quota.ErrUnavailable), status: 503, typ: TypeQuotaUnavailable, expected: true},
		{name: "a dispatched run whose outcome was lost", err: &sandbox.OutcomeUnknownError{Reason: "lost"}, status: 502, typ: TypeOutcomeUnknown, expected: true},
		{name: "the sandbox down", err: &sandbox.UnavailableError{Reason: "no nsjail"}, status: 503, typ: TypeSandboxUnavailable, expected: true},
		{name: "a full run queue", err: errOverloaded, status: 503, typ: TypeOverloaded, retryAfter: time.Second, expected: true},
		{name: "no resolve slot", err: fmt.Errorf("resolving: %w", &environments.ResolvesBusyError{Tenant: true, Max: 1}), status: 503, typ: TypeOverloaded, retryAfter: time.Second, expected: true},
		{name: "no output memory", err: fmt.Errorf("%w: 1 byte", errOutputBudget), status: 503, typ: TypeOverloaded, retryAfter: time.Second, expected: true},
		{name: "a failed audit write", err: fmt.Errorf("%w: disk full", errAudit), status: 500, typ: TypeAuditError},
		{name: "a cancelled request", err: context.Canceled, status: 500, typ: TypeInternal},
		{name: "anything else", err: errors.New("bug"), status: 500, typ: TypeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := Refusal(tc.err)
			if e.Status != tc.status || e.Type != tc.typ || e.RetryAfter != tc.retryAfter || e.Expected() != tc.expected {
				t.Errorf("got %d %s retry %s expected %v, want %d %s retry %s expected %v",
					e.Status, e.Type, e.RetryAfter, e.Expected(), tc.status, tc.typ, tc.retryAfter, tc.expected)
			}
		})
	}
	if e := Refusal(&ResultExpiredError{Outcome: "error:Timeout"}); e.Body().OriginalStatus != "error:Timeout" {
		t.Errorf("ResultExpired body %+v: want the original outcome", e.Body())
	}
	if e := Refusal(&quota.ExceededError{Kind: quota.KindQueued, Limit: 2}); !strings.Contains(e.Message, "max_queued (2)") {
		t.Errorf("max_queued refusal message %q: want it to name max_queued and its value", e.Message)
	}
	if e := Refusal(Denied(nil)); !reflect.DeepEqual(e.Reasons, []string{"denied by policy"}) {
		t.Errorf("a deny without reasons: %v, want the default reason", e.Reasons)
	}
}

func TestPolicyRequestGrantsTheFixturesToolsOnlyInTestMode(t *testing.T) {
	fixtures := &Fixtures{Tools: map[string]json.RawMessage{"z.tool": []byte("1"), "a.tool": []byte("2")}}
	tests := []struct {
		name string
		req  Request
		want []string
	}{
		{name: "test mode asks for the fixtures' tools, sorted", req: Request{Mode: "test", Tools: []string{"m.*"}, Fixtures: fixtures}, want: []string{"a.tool", "m.*", "z.tool"}},
		{name: "run mode asks only for its tools", req: Request{Mode: "run", Tools: []string{"m.*"}, Fixtures: fixtures}, want: []string{"m.*"}},
		{name: "no tools is an empty list", req: Request{Mode: "run"}, want: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.req.PolicyRequest()
			if !reflect.DeepEqual(got.Tools, tc.want) {
				t.Errorf("tools = %#v, want %#v", got.Tools, tc.want)
			}
		})
	}
	got := (&Request{NetworkAccess: "proxy", Egress: &EgressRequest{Allow: []string{"*.example.com:443"}}}).PolicyRequest()
	if got.NetworkAccess != "proxy" || !reflect.DeepEqual(got.EgressAllow, []string{"*.example.com:443"}) {
		t.Errorf("egress: %+v", got)
	}
}

func TestQuotaRefusalIsWhatTheAuditRecordSays(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want audit.Quota
	}{
		{name: "concurrency", err: &quota.ExceededError{Kind: quota.KindConcurrency, RetryAfter: 1500 * time.Millisecond},
			want: audit.Quota{Outcome: audit.QuotaExceeded, Kind: "concurrency", RetryAfterMS: 1500}},
		{name: "budget", err: fmt.Errorf("admit: %w", &quota.ExceededError{Kind: quota.KindBudget, RetryAfter: time.Second}),
			want: audit.Quota{Outcome: audit.QuotaBudgetExhausted, Kind: "budget", RetryAfterMS: 1000}},
		{name: "backend down", err: quota.ErrUnavailable, want: audit.Quota{Outcome: audit.QuotaUnavailable}},
		{name: "anything else fails closed", err: errors.New("?"), want: audit.Quota{Outcome: audit.QuotaUnavailable}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := quotaRefusal(tc.err); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRunEnvelope(t *testing.T) {
	x := &state{id: "e1", decision: &policy.Decision{ID: "d1", NetworkAccess: "none"}, limits: limits.Default}
	tenant := tenancy.Tenant{ID: "t1"}
	t.Run("an ok run carries its result and an empty log list", func(t *testing.T) {
		env := runEnvelope(context.Background(), x, tenant, sandbox.Result{Status: sandbox.StatusOK, Result: json.RawMessage(`{"a":1}`)})
		if env.Status != sandbox.StatusOK || string(env.Result) != `{"a":1}` || env.Error != nil || env.Logs == nil {
			t.Errorf("envelope %+v", env)
		}
		if env.Decision == nil || env.Decision.ID != "d1" || env.Decision.Egress.Allow == nil {
			t.Errorf("decision %+v: want d1 with an egress list, never null", env.Decision)
		}
		if env.ExecutionStatus() != "ok" {
			t.Errorf("execution status %q", env.ExecutionStatus())
		}
	})
	t.Run("a failed run drops its result and keeps the error's position", func(t *testing.T) {
		env := runEnvelope(context.Background(), x, tenant, sandbox.Result{Status: sandbox.StatusError, Result: json.RawMessage(`1`),
			Error: &sandbox.ErrorInfo{Type: sandbox.ErrInvalidSource, Message: "bad", Line: 3, Column: -1}})
		if env.Result != nil || env.Error == nil || env.Error.Type != sandbox.ErrInvalidSource || env.Error.Line != 3 || env.Error.Column != 0 {
			t.Errorf("envelope %+v error %+v", env, env.Error)
		}
		if env.ExecutionStatus() != "error:"+sandbox.ErrInvalidSource {
			t.Errorf("execution status %q", env.ExecutionStatus())
		}
	})
	t.Run("a run without a status or error report is a crash", func(t *testing.T) {
		env := runEnvelope(context.Background(), x, tenant, sandbox.Result{})
		if env.Status != sandbox.StatusError || env.Error == nil || env.Error.Type != sandbox.ErrSandboxCrashed {
			t.Errorf("envelope %+v error %+v", env, env.Error)
		}
	})
}

func TestAuditRecord(t *testing.T) {
	p := tenancy.Principal{TenantID: "t1", Subject: "s", Roles: []string{"executor"}}
	t.Run("a policy error names the failed decision", func(t *testing.T) {
		x := &state{id: "e1", principal: p, failedDecisionID: "d-bad"}
		env := refusalEnvelope(context.Background(), x, Refusal(ErrPolicy))
		r := auditRecord(context.Background(), x, 500, env)
		if r.Decision == nil || r.Decision.ID != "d-bad" || r.Decision.Allow || r.Outcome.ErrorType != TypePolicyError || r.Outcome.HTTPStatus != 500 {
			t.Errorf("record %+v decision %+v", r, r.Decision)
		}
	})
	t.Run("a denied syscall is named, the source only when the policy asks", func(t *testing.T) {
		dec := &policy.Decision{ID: "d1", Allow: true}
		x := &state{id: "e1", principal: p, req: &Request{Source: "src"}, decision: dec,
			result: &sandbox.Result{Status: sandbox.StatusError, DeniedSyscall: "ptrace"}}
		env := &Envelope{Status: sandbox.StatusError, Error: &ErrorBody{Type: sandbox.ErrSyscallDenied}}
		r := auditRecord(context.Background(), x, 200, env)
		if r.Outcome.Syscall != "ptrace" || r.Source != "" {
			t.Errorf("record %+v", r)
		}
		dec.Audit.RecordSource = true
		if r := auditRecord(context.Background(), x, 200, env); r.Source != "src" {
			t.Errorf("source %q, want it recorded", r.Source)
		}
	})
}
