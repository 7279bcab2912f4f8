package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/execgate/execgate/limits"
)

// value converts in to an OPA value directly (no JSON round trip). It
// produces exactly what the JSON encoding of in would: nil maps and slices
// become null.
func (in Input) value() (ast.Value, error) {
	tenant, err := in.Tenant.term()
	if err != nil {
		return nil, err
	}
	return in.valueWith(tenant), nil
}

// term converts the tenant document (id, plan, data) to an OPA value.
func (t TenantInput) term() (*ast.Term, error) {
	data := ast.NullTerm()
	if t.Data != nil {
		v, err := ast.InterfaceToValue(t.Data)
		if err != nil {
			return nil, fmt.Errorf("tenant data: %w", err)
		}
		data = ast.NewTerm(v)
	}
	return ast.ObjectTerm(
		item("id", ast.StringTerm(t.ID)),
		item("plan", ast.StringTerm(t.Plan)),
		item("data", data),
	), nil
}

// valueWith is value with input.tenant already converted (tenant.term()).
func (in Input) valueWith(tenant *ast.Term) ast.Value {
	r := in.Request
	return ast.NewObject(
		item("version", ast.InternedTerm(in.Version)),
		item("tenant", tenant),
		item("subject", ast.ObjectTerm(
			item("sub", stringTerm(in.Subject.Sub)),
			item("roles", stringsTerm(in.Subject.Roles)),
		)),
		item("request", ast.ObjectTerm(
			item("language", stringTerm(r.Language)),
			item("entrypoint", stringTerm(r.Entrypoint)),
			item("source_sha256", stringTerm(r.SourceSHA256)),
			item("source_bytes", ast.InternedTerm(r.SourceBytes)),
			item("args_bytes", ast.InternedTerm(r.ArgsBytes)),
			item("requirements", stringsTerm(r.Requirements)),
			item("packages", packagesTerm(r.Packages)),
			item("network_access", stringTerm(r.NetworkAccess)),
			item("egress_hosts", stringsTerm(r.EgressHosts)),
			item("limits", limitsTerm(r.Limits)),
			item("mode", stringTerm(r.Mode)),
			item("tools", stringsTerm(r.Tools)),
			item("isolation", stringTerm(r.Isolation)),
			item("runtime", stringTerm(r.Runtime)),
			item("secrets", stringsTerm(r.Secrets)),
		)),
	)
}

// keyTerms are the input's object keys, built once: OPA never modifies a
// term it is given, so every input can share them (as OPA shares its own
// interned terms).
var keyTerms = func() map[string]*ast.Term {
	m := map[string]*ast.Term{}
	for _, k := range []string{"version", "tenant", "id", "plan", "data", "subject", "sub", "roles",
		"request", "language", "entrypoint", "source_sha256", "source_bytes", "args_bytes",
		"requirements", "packages", "name", "version", "index", "via", "network_access", "egress_hosts", "limits", "timeout_ms", "cpu_ms",
		"mode", "tools", "isolation", "runtime", "secrets"} {
		m[k] = stringTerm(k)
	}
	for _, k := range limits.Keys {
		m[k] = stringTerm(k)
	}
	return m
}()

// limitsTerm is l as the input's request.limits object.
func limitsTerm(l Limits) *ast.Term {
	fs := l.Fields()
	items := make([][2]*ast.Term, len(fs))
	for i, f := range fs {
		items[i] = item(f.Key, int64Term(*f.V))
	}
	return ast.ObjectTerm(items...)
}

func item(k string, v *ast.Term) [2]*ast.Term {
	if t, ok := keyTerms[k]; ok {
		return [2]*ast.Term{t, v}
	}
	return ast.Item(ast.StringTerm(k), v)
}

// int64Term is n as a number term, interned for small values.
func int64Term(n int64) *ast.Term { return ast.InternedTerm(n) }

// stringTerm is s as a string term, interned when OPA interns s.
func stringTerm(s string) *ast.Term { return ast.InternedTerm(s) }

func stringsTerm(s []string) *ast.Term {
	if s == nil {
		return ast.NullTerm()
	}
	terms := make([]*ast.Term, len(s))
	for i, x := range s {
		terms[i] = stringTerm(x)
	}
	return ast.ArrayTerm(terms...)
}

var networkModes = []string{"none", "proxy", "host"}

// decodeDecision turns the policy's result into a Decision. A deny is
// decoded leniently (it only needs its reasons, and gets a generic one if it
// has none); an allow must have the full shape or it is ErrMalformed, so a
// half-written decision can never let a run through.
func decodeDecision(v any) (Decision, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Decision{}, fmt.Errorf("%w: decision is %s, not an object", ErrMalformed, kind(v))
	}
	allow, ok := m["allow"].(bool)
	if !ok {
		return Decision{}, fmt.Errorf("%w: allow is %s, not a boolean", ErrMalformed, kind(m["allow"]))
	}
	var d Decision
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	d.Allow = allow

	d.Reasons = []string{}
	if rs, ok := m["reasons"].([]any); ok {
		for _, r := range rs {
			if s, ok := r.(string); ok {
				d.Reasons = append(d.Reasons, s)
			} else {
				b, _ := json.Marshal(r)
				d.Reasons = append(d.Reasons, string(b))
			}
		}
	} else if m["reasons"] != nil {
		fail("reasons is %s, not an array", kind(m["reasons"]))
	}

	d.NetworkAccess, _ = m["network_access"].(string)
	if !slices.Contains(networkModes, d.NetworkAccess) {
		fail("network_access is %q, not none, proxy or host", d.NetworkAccess)
	}
	if lm, ok := m["limits"].(map[string]any); ok {
		for _, f := range d.Limits.Fields() {
			n, err := positiveInt(lm[f.Key])
			if err != nil {
				fail("limits.%s %v", f.Key, err)
			}
			*f.V = n
		}
	} else {
		fail("limits is %s, not an object", kind(m["limits"]))
	}
	em, _ := m["egress"].(map[string]any)
	var err error
	if d.Egress.Allow, err = stringList(em["allow"]); err != nil {
		fail("egress.allow %v", err)
	}
	if d.RequirementsAllowed, ok = m["requirements_allowed"].(bool); !ok {
		fail("requirements_allowed is %s, not a boolean", kind(m["requirements_allowed"]))
	}
	if d.Tools, err = stringList(m["tools"]); err != nil {
		fail("tools %v", err)
	}
	if d.Isolation, err = decodeIsolation(m["isolation"]); err != nil {
		fail("isolation %v", err)
	}
	if d.Runtime, err = decodeRuntime(m["runtime"]); err != nil {
		fail("runtime %v", err)
	}
	d.Secrets = []string{}
	if v, ok := m["secrets"]; ok {
		if d.Secrets, err = stringList(v); err != nil {
			fail("secrets %v", err)
		}
	}
	am, _ := m["audit"].(map[string]any)
	if rs, ok := am["record_source"]; ok {
		if d.Audit.RecordSource, ok = rs.(bool); !ok {
			fail("audit.record_source is %s, not a boolean", kind(rs))
		}
	}

	if !allow {
		if len(d.Reasons) == 0 {
			d.Reasons = []string{"denied by policy (no reason given)"}
		}
		return d, nil
	}
	if len(d.Reasons) > 0 {
		fail("allow is true but reasons are %q", d.Reasons)
	}
	if err := errors.Join(errs...); err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return d, nil
}

// isolationLevels are the values a decision's isolation may take.
var isolationLevels = []string{"jail", "process"}

// decodeIsolation reads a decision's isolation: absent means "jail" (a
// policy set written before the field), anything else must be a level.
func decodeIsolation(v any) (string, error) {
	if v == nil {
		return "jail", nil
	}
	s, ok := v.(string)
	if !ok {
		return "jail", fmt.Errorf("is %s, not a string", kind(v))
	}
	if !slices.Contains(isolationLevels, s) {
		return "jail", fmt.Errorf("is %q, not jail or process", s)
	}
	return s, nil
}

// knownRuntime is limits.KnownRuntime (a name fastDecision can reach).
var knownRuntime = limits.KnownRuntime

// decodeRuntime reads a decision's runtime: absent or "" means none (a
// policy set written before the field, or a run of another language),
// anything else must be a known runtime.
func decodeRuntime(v any) (string, error) {
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("is %s, not a string", kind(v))
	}
	if s != "" && !limits.KnownRuntime(s) {
		return "", fmt.Errorf("is %q, not one of %s", s, strings.Join(limits.Runtimes, ", "))
	}
	return s, nil
}

func positiveInt(v any) (int64, error) {
	var f float64
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		if err == nil {
			f = float64(i)
			if i > 0 {
				return i, nil
			}
			break
		}
		if f, err = n.Float64(); err != nil {
			return 0, fmt.Errorf("is %q, not a number", n)
		}
	case int64:
		f = float64(n)
	case int:
		f = float64(n)
	case float64:
		f = n
	default:
		return 0, fmt.Errorf("is %s, not a number", kind(v))
	}
	if f <= 0 || f != math.Trunc(f) || f > math.MaxInt64/2 {
		return 0, fmt.Errorf("is %v, not a positive integer", f)
	}
	return int64(f), nil
}

func stringList(v any) ([]string, error) {
	xs, ok := v.([]any)
	if !ok {
		return []string{}, fmt.Errorf("is %s, not an array", kind(v))
	}
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		s, ok := x.(string)
		if !ok {
			return out, fmt.Errorf("has %s, not a string", kind(x))
		}
		out = append(out, s)
	}
	return out, nil
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null/missing"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number, int, int64, float64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// decodeDecisionValue decodes the policy's result straight from OPA's value
// when it has the expected shape, without converting it to Go maps first
// (a quarter of a decision's allocations went there). Anything unexpected —
// a missing key, a wrong type, a non-string reason, an allow with reasons —
// takes the general path, decodeDecision, so the answers and error messages
// are the same either way (TestSeededDecisionsMatchFullEvaluation decodes
// through both).
func decodeDecisionValue(v ast.Value) (Decision, error) {
	if d, ok := fastDecision(v); ok {
		return d, nil
	}
	x, err := ast.JSON(v)
	if err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return decodeDecision(x)
}

var (
	decisionKeys = struct {
		allow, reasons, network, limits, egress, egressAllow, requirements, tools, audit, recordSource, isolation, runtime, secrets *ast.Term
	}{
		ast.StringTerm("allow"), ast.StringTerm("reasons"), ast.StringTerm("network_access"), ast.StringTerm("limits"),
		ast.StringTerm("egress"), ast.StringTerm("allow"), ast.StringTerm("requirements_allowed"), ast.StringTerm("tools"),
		ast.StringTerm("audit"), ast.StringTerm("record_source"), ast.StringTerm("isolation"),
		ast.StringTerm("runtime"), ast.StringTerm("secrets"),
	}
	limitKeys = func() []*ast.Term {
		var ts []*ast.Term
		for _, k := range limits.Keys {
			ts = append(ts, ast.StringTerm(k))
		}
		return ts
	}()
)

// fastDecision decodes a well-formed decision; ok is false for anything
// else.
func fastDecision(v ast.Value) (d Decision, ok bool) {
	k := decisionKeys
	obj, ok := v.(ast.Object)
	if !ok {
		return d, false
	}
	get := func(o ast.Object, key *ast.Term) ast.Value {
		if t := o.Get(key); t != nil {
			return t.Value
		}
		return nil
	}
	allow, ok := get(obj, k.allow).(ast.Boolean)
	if !ok {
		return d, false
	}
	d.Allow = bool(allow)
	if d.Reasons, ok = fastStrings(get(obj, k.reasons)); !ok || (d.Allow && len(d.Reasons) > 0) {
		return d, false
	}
	net, ok := get(obj, k.network).(ast.String)
	if !ok || !slices.Contains(networkModes, string(net)) {
		return d, false
	}
	d.NetworkAccess = string(net)
	limitsObj, ok := get(obj, k.limits).(ast.Object)
	if !ok {
		return d, false
	}
	for i, f := range d.Limits.Fields() {
		dst := f.V
		n, ok := get(limitsObj, limitKeys[i]).(ast.Number)
		if !ok {
			return d, false
		}
		x, ok := n.Int64()
		if !ok || x <= 0 {
			return d, false
		}
		*dst = x
	}
	egress, ok := get(obj, k.egress).(ast.Object)
	if !ok {
		return d, false
	}
	if d.Egress.Allow, ok = fastStrings(get(egress, k.egressAllow)); !ok {
		return d, false
	}
	req, ok := get(obj, k.requirements).(ast.Boolean)
	if !ok {
		return d, false
	}
	d.RequirementsAllowed = bool(req)
	if d.Tools, ok = fastStrings(get(obj, k.tools)); !ok {
		return d, false
	}
	if a := get(obj, k.audit); a != nil {
		audit, ok := a.(ast.Object)
		if !ok {
			return d, false
		}
		if rs := get(audit, k.recordSource); rs != nil {
			b, ok := rs.(ast.Boolean)
			if !ok {
				return d, false
			}
			d.Audit.RecordSource = bool(b)
		}
	}
	d.Isolation = "jail"
	if iso := get(obj, k.isolation); iso != nil {
		s, ok := iso.(ast.String)
		if !ok || !slices.Contains(isolationLevels, string(s)) {
			return d, false
		}
		d.Isolation = string(s)
	}
	if rt := get(obj, k.runtime); rt != nil {
		s, ok := rt.(ast.String)
		if !ok || (s != "" && !knownRuntime(string(s))) {
			return d, false
		}
		d.Runtime = string(s)
	}
	d.Secrets = []string{}
	if sec := get(obj, k.secrets); sec != nil {
		if d.Secrets, ok = fastStrings(sec); !ok {
			return d, false
		}
	}
	if !d.Allow && len(d.Reasons) == 0 {
		d.Reasons = []string{"denied by policy (no reason given)"}
	}
	return d, true
}

// fastStrings is an array of strings as a (non-nil) slice.
func fastStrings(v ast.Value) ([]string, bool) {
	arr, ok := v.(*ast.Array)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, arr.Len())
	for i := range arr.Len() {
		s, ok := arr.Elem(i).Value.(ast.String)
		if !ok {
			return nil, false
		}
		out = append(out, string(s))
	}
	return out, true
}

// packagesTerm is the resolved package list as an array of objects.
func packagesTerm(ps []Package) *ast.Term {
	if ps == nil {
		return ast.NullTerm()
	}
	terms := make([]*ast.Term, len(ps))
	for i, p := range ps {
		terms[i] = ast.ObjectTerm(
			item("name", stringTerm(p.Name)),
			item("version", stringTerm(p.Version)),
			item("index", stringTerm(p.Index)),
			item("via", stringsTerm(p.Via)),
		)
	}
	return ast.ArrayTerm(terms...)
}
