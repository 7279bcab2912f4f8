package policy

import (
	"crypto/sha256"
	"slices"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Decision memo: answering a repeated question without evaluating again.
//
// A decision is a function of the input fields the policies read, the
// compiled policies and their base data, provided no rule asks the clock,
// a random source or the evaluation itself (print, trace, rule metadata)
// and none uses `with`. For such a policy set (decided from the compiled
// modules, extension modules and bundles included, see analyzeMemo) the
// served set remembers each decision under a key built from exactly the
// input fields some rule reads: with the default policies that is the
// tenant document, the subject's roles and the request's language, mode,
// network, egress hosts, requirements, limits and tools — not the source
// hash or sizes, the entrypoint or the subject's name, which no default rule
// reads. A policy that reads input.request.source_sha256 makes it part of
// the key. Only successful decisions are kept; the decision ID is fresh
// every time. The memo belongs to one served policy set: a reload starts
// empty. TestSeededDecisionsMatchFullEvaluation and
// FuzzSeededDecisionMatchesFull also decide through the memo and compare
// remembered decisions with plain evaluations; TestInputFieldsCoverTheInput
// keeps inputFields in step with the input document.

// DefaultDecisionCache is the number of decisions remembered per policy set
// when Options.DecisionCache is 0.
const DefaultDecisionCache = 4096

// inputField is one field of Input that a memo key can hold.
type inputField struct {
	path      []string // below input
	appendKey func(b []byte, in Input) []byte
}

// inputFields are the fields of Input other than the tenant (which is keyed
// whole by appendTenantKey). A ref the policy reads selects every field it
// overlaps: input.request selects all request fields,
// input.request.limits.cpu_ms selects request.limits.
var inputFields = []inputField{
	{[]string{"version"}, func(b []byte, in Input) []byte { return appendKeyInt(b, int64(in.Version)) }},
	{[]string{"subject", "sub"}, func(b []byte, in Input) []byte { return appendKeyString(b, in.Subject.Sub) }},
	{[]string{"subject", "roles"}, func(b []byte, in Input) []byte { return appendKeyStrings(b, in.Subject.Roles) }},
	{[]string{"request", "language"}, func(b []byte, in Input) []byte { return appendKeyString(b, in.Request.Language) }},
	{[]string{"request", "entrypoint"}, func(b []byte, in Input) []byte { return appendKeyString(b, in.Request.Entrypoint) }},
	{[]string{"request", "source_sha256"}, func(b []byte, in Input) []byte { return appendKeyString(b, in.Request.SourceSHA256) }},
	{[]string{"request", "source_bytes"}, func(b []byte, in Input) []byte { return appendKeyInt(b, int64(in.Request.SourceBytes)) }},
	{[]string{"request", "args_bytes"}, func(b []byte, in Input) []byte { return appendKeyInt(b, int64(in.Request.ArgsBytes)) }},
	{[]string{"request", "requirements"}, func(b []byte, in Input) []byte { return appendKeyStrings(b, in.Request.Requirements) }},
	{[]string{"request", "packages"}, func(b []byte, in Input) []byte {
		b = appendKeyInt(b, int64(len(in.Request.Packages)))
		for _, p := range in.Request.Packages {
			b = appendKeyString(b, p.Name)
			b = appendKeyString(b, p.Version)
			b = appendKeyString(b, p.Index)
			b = appendKeyStrings(b, p.Via)
		}
		return b
	}},
	{[]string{"request", "network_access"}, func(b []byte, in Input) []byte { return appendKeyString(b, in.Request.NetworkAccess) }},
	{[]string{"request", "egress_hosts"}, func(b []byte, in Input) []byte { return appendKeyStrings(b, in.Request.EgressHosts) }},
	{[]string{"request", "limits"}, func(b []byte, in Input) []byte {
		l := in.Request.Limits
		for _, f := range l.Fields() {
			b = appendKeyInt(b, *f.V)
		}
		return b
	}},
	{[]string{"request", "mode"}, func(b []byte, in Input) []byte { return appendKeyString(b, in.Request.Mode) }},
	{[]string{"request", "tools"}, func(b []byte, in Input) []byte { return appendKeyStrings(b, in.Request.Tools) }},
	{[]string{"request", "isolation"}, func(b []byte, in Input) []byte { return appendKeyString(b, in.Request.Isolation) }},
	{[]string{"request", "runtime"}, func(b []byte, in Input) []byte { return appendKeyString(b, in.Request.Runtime) }},
	{[]string{"request", "secrets"}, func(b []byte, in Input) []byte { return appendKeyStrings(b, in.Request.Secrets) }},
}

// memoPlan is what a policy set's decisions depend on.
type memoPlan struct {
	tenant      bool         // input.tenant (or all of input) is read
	fields      []inputField // the other fields read, in inputFields order
	names       []string     // their paths, for tests and the log
	uncacheable string       // why decisions are not remembered; "" when they are
}

// analyzeMemo decides whether the decisions of c may be remembered and on
// which input fields they depend. It walks every rule and function of every
// module (a superset of what the decision reaches), so it errs towards
// keying on more fields or not remembering at all.
func analyzeMemo(c *ast.Compiler) memoPlan {
	var p memoPlan
	selected := make([]bool, len(inputFields))
	selectPath := func(path []string) {
		if len(path) == 0 {
			p.tenant = true
			for i := range selected {
				selected[i] = true
			}
			return
		}
		if path[0] == "tenant" {
			p.tenant = true
			return
		}
		for i, f := range inputFields {
			n := min(len(path), len(f.path))
			if slices.Equal(path[:n], f.path[:n]) {
				selected[i] = true
			}
		}
	}
	for _, name := range sortedModuleNames(c) {
		m := c.Modules[name]
		ast.WalkExprs(m, func(e *ast.Expr) bool {
			if len(e.With) > 0 && p.uncacheable == "" {
				p.uncacheable = "a rule uses `with` (" + e.Location.String() + ")"
			}
			if e.IsCall() {
				p.checkCall(e.Operator(), e.Location)
			}
			return false
		})
		var visit func(t *ast.Term) bool
		visit = func(t *ast.Term) bool {
			switch v := t.Value.(type) {
			case ast.Var:
				if v.Equal(ast.InputRootDocument.Value) {
					selectPath(nil)
				}
			case ast.Ref:
				if v.HasPrefix(ast.InputRootRef) {
					selectPath(groundStrings(v[1:]))
				}
				for _, x := range v[1:] { // the head is a root or a local
					ast.WalkTerms(x, visit)
				}
				return true
			case ast.Call:
				if op, ok := v[0].Value.(ast.Ref); ok {
					p.checkCall(op, t.Location)
				} else if p.uncacheable == "" {
					p.uncacheable = "a call with a computed operator"
				}
			}
			return false
		}
		ast.WalkTerms(m, visit)
	}
	for i, f := range inputFields {
		if selected[i] {
			p.fields = append(p.fields, f)
			p.names = append(p.names, "input."+strings.Join(f.path, "."))
		}
	}
	if p.tenant {
		p.names = append(p.names, "input.tenant")
	}
	return p
}

// checkCall marks the plan uncacheableeable when op is a builtin whose result
// does not follow from its arguments (or is unknown).
func (p *memoPlan) checkCall(op ast.Ref, loc *ast.Location) {
	if p.uncacheable != "" || op.HasPrefix(ast.DefaultRootRef) {
		return // user functions are walked as rules
	}
	name := op.String()
	b, ok := ast.BuiltinMap[name]
	switch {
	case !ok:
		p.uncacheable = "calls " + name + ", which is not a known builtin"
	case b.Nondeterministic || slices.Contains(contextBuiltins, b.Name):
		p.uncacheable = "calls " + name + " (" + loc.String() + "), whose result depends on more than its arguments"
	}
}

// groundStrings is the leading string keys of a ref's tail.
func groundStrings(ts []*ast.Term) []string {
	var out []string
	for _, t := range ts {
		s, ok := t.Value.(ast.String)
		if !ok {
			break
		}
		out = append(out, string(s))
	}
	return out
}

// appendKey appends the memo key of in to b. It reports false when in
// cannot be keyed (tenant data of a type appendTenantKey does not encode).
func (p *memoPlan) appendKey(b []byte, in Input) ([]byte, bool) {
	if p.tenant {
		var ok bool
		if b, ok = appendTenantKey(b, in.Tenant); !ok {
			return b, false
		}
	}
	for _, f := range p.fields {
		b = f.appendKey(b, in)
	}
	return b, true
}

func appendKeyStrings(b []byte, s []string) []byte {
	if s == nil {
		return append(b, 'n')
	}
	b, _ = appendKeyValue(b, s)
	return b
}

// memoKey is the SHA-256 of an appended key: every entry costs the same
// whatever the size of the tenant's policy data.
type memoKey [sha256.Size]byte

// decisionMemo remembers decisions by key. It holds at most max entries in
// two generations: when the young one is full it becomes the old one (the
// previous old one is dropped), and a hit in the old one moves the entry
// back to the young one — an LRU approximation without per-hit bookkeeping.
type decisionMemo struct {
	plan memoPlan
	max  int

	mu         sync.RWMutex // guards young and old
	young, old map[memoKey]Decision
}

func newDecisionMemo(plan memoPlan, max int) *decisionMemo {
	if plan.uncacheable != "" || max <= 0 {
		return nil
	}
	return &decisionMemo{plan: plan, max: max, young: map[memoKey]Decision{}}
}

// get returns a copy of the decision remembered under key.
func (m *decisionMemo) get(key memoKey) (Decision, bool) {
	m.mu.RLock()
	d, ok := m.young[key]
	fromOld := false
	if !ok {
		d, ok = m.old[key]
		fromOld = ok
	}
	m.mu.RUnlock()
	if fromOld {
		m.put(key, d)
	}
	return d.clone(), ok
}

// put remembers a copy of d under key.
func (m *decisionMemo) put(key memoKey, d Decision) {
	d = d.clone()
	d.ID, d.PolicyRevision = "", ""
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.young) >= max(1, m.max/2) {
		m.old, m.young = m.young, make(map[memoKey]Decision, len(m.young))
	}
	m.young[key] = d
}

// clone returns d with its own slices, so a caller may change them.
func (d Decision) clone() Decision {
	d.Reasons = slices.Clone(d.Reasons)
	d.Egress.Allow = slices.Clone(d.Egress.Allow)
	d.Tools = slices.Clone(d.Tools)
	return d
}
