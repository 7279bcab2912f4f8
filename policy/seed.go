package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Tenant seeds: evaluating once per tenant what depends only on the tenant.
//
// Much of a decision depends on input.tenant alone: whether the tenant is
// known and its policy data well formed, its normalised package lists, its
// parsed egress patterns, its limit caps, the platform constants. These are
// the same for every request of a tenant, so a served policy set computes
// them once per tenant (seedQuery, evaluated with input {"tenant": …}) and
// hands them to each evaluation through OPA's virtual document cache
// (seedCache). The evaluator then finds these rules' values already cached,
// exactly as it would after computing them itself earlier in the same query.
//
// Which rules qualify is decided from the compiled policies, extension
// modules included (tenantOnlyRefs): a rule qualifies when every rule it
// can reach reads no input other than input.tenant, calls no
// non-deterministic builtin (time.now_ns, rand, …) and uses no `with`.
// The answer is therefore identical to a full evaluation;
// TestSeededDecisionsMatchFullEvaluation and FuzzSeededDecisionMatchesFull
// compare the two over a table and a fuzz corpus.
//
// Invalidation: seeds belong to one served policy set (a reload starts with
// none) and are keyed by the tenant's id, plan and exact policy data
// (appendTenantKey), so a config change is a new key.

// maxSeeds bounds the seeds kept per policy set; when full, the map is
// cleared (tenants are few; this only guards against unbounded growth).
const maxSeeds = 4096

// seedQuery evaluates the tenant-only rules of a compiled policy set.
type seedQuery struct {
	refs  []ast.Ref // rule paths, index i is result element i
	query rego.PreparedEvalQuery
}

// seed is one tenant's precomputed values.
type seed struct {
	tenant *ast.Term // input.tenant as an OPA value
	cache  *refCache // read-only after newSeed
}

// seeds is the per-tenant seed cache of one served policy set.
type seeds struct {
	mu sync.RWMutex // guards m
	m  map[string]*seed
}

func (s *seeds) get(key string) *seed {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[key]
}

func (s *seeds) put(key string, sd *seed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxSeeds {
		s.m = make(map[string]*seed)
	}
	s.m[key] = sd
}

// tenantOnlyRefs lists the paths of the (non-function) rules of c whose
// value depends on input.tenant, data and constants only, in a stable order.
func tenantOnlyRefs(c *ast.Compiler) []ast.Ref {
	a := tenantAnalysis{c: c, memo: map[*ast.Rule]bool{}}
	seen := map[string]bool{}
	var out []ast.Ref
	for _, name := range sortedModuleNames(c) {
		for _, r := range c.Modules[name].Rules {
			if len(r.Head.Args) > 0 || !r.Head.Ref().IsGround() {
				continue
			}
			ref := r.Ref()
			key := ref.String()
			if seen[key] {
				continue
			}
			seen[key] = true
			if a.allTenantOnly(c.GetRulesExact(ref)) {
				out = append(out, ref)
			}
		}
	}
	return out
}

func sortedModuleNames(c *ast.Compiler) []string {
	names := make([]string, 0, len(c.Modules))
	for n := range c.Modules {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// tenantAnalysis decides, rule by rule, whether a rule is tenant-only.
type tenantAnalysis struct {
	c    *ast.Compiler
	memo map[*ast.Rule]bool
}

func (a *tenantAnalysis) allTenantOnly(rules []*ast.Rule) bool {
	if len(rules) == 0 {
		return false
	}
	for _, r := range rules {
		if !a.tenantOnly(r) {
			return false
		}
	}
	return true
}

func (a *tenantAnalysis) tenantOnly(r *ast.Rule) bool {
	if v, ok := a.memo[r]; ok {
		return v
	}
	a.memo[r] = false // Rego forbids recursion; this only guards the walk
	ok := true
	ast.WalkExprs(r, func(e *ast.Expr) bool {
		if len(e.With) > 0 {
			ok = false
		}
		return !ok
	})
	var visit func(t *ast.Term) bool
	visit = func(t *ast.Term) bool {
		if !ok {
			return true
		}
		switch v := t.Value.(type) {
		case ast.Var:
			if v.Equal(ast.InputRootDocument.Value) {
				ok = false
			}
		case ast.Ref:
			ok = a.refTenantOnly(v)
			for _, x := range v[1:] { // the head is a root or a local
				ast.WalkTerms(x, visit)
			}
			return true
		case ast.Call:
			op, isRef := v[0].Value.(ast.Ref)
			ok = isRef && a.callTenantOnly(op)
		}
		return !ok
	}
	ast.WalkTerms(r, visit)
	for _, e := range exprCalls(r) {
		if ok {
			ok = a.callTenantOnly(e)
		}
	}
	a.memo[r] = ok
	return ok
}

// exprCalls returns the operators of the call expressions in r.
func exprCalls(r *ast.Rule) []ast.Ref {
	var ops []ast.Ref
	ast.WalkExprs(r, func(e *ast.Expr) bool {
		if e.IsCall() {
			ops = append(ops, e.Operator())
		}
		return false
	})
	return ops
}

func (a *tenantAnalysis) refTenantOnly(ref ast.Ref) bool {
	switch {
	case ref.HasPrefix(ast.InputRootRef):
		// input.tenant…, with "tenant" spelt out.
		return len(ref) >= 2 && ref[1].Equal(ast.StringTerm("tenant"))
	case ref.HasPrefix(ast.DefaultRootRef):
		if len(ref) < 2 {
			return false
		}
		rules := a.c.GetRules(ref.GroundPrefix())
		for _, r := range a.c.GetRulesDynamicWithOpts(ref, ast.RulesOptions{}) {
			if !slices.Contains(rules, r) {
				rules = append(rules, r)
			}
		}
		for _, r := range rules {
			if !a.tenantOnly(r) {
				return false
			}
		}
		return true // rules reached, or base data (constant per policy set)
	default:
		return true // a local variable's ref
	}
}

func (a *tenantAnalysis) callTenantOnly(ref ast.Ref) bool {
	if ref.HasPrefix(ast.DefaultRootRef) {
		return a.refTenantOnly(ref)
	}
	b, ok := ast.BuiltinMap[ref.String()]
	if !ok {
		return false // unknown: be conservative
	}
	return !b.Nondeterministic && !slices.Contains(contextBuiltins, b.Name)
}

// contextBuiltins depend on, or report to, the evaluation rather than their
// arguments: their rules are never seeded.
var contextBuiltins = []string{
	ast.Print.Name, ast.InternalPrint.Name, ast.Trace.Name,
	ast.RegoMetadataChain.Name, ast.RegoMetadataRule.Name,
}

// newSeedQuery prepares the query evaluating refs (one array per ref: [] when
// undefined, [value] otherwise). It returns nil when there is nothing to seed.
func newSeedQuery(ctx context.Context, c *ast.Compiler, store storage.Store, refs []ast.Ref) (*seedQuery, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	items := make([]*ast.Term, len(refs))
	for i, ref := range refs {
		x := ast.VarTerm("x")
		items[i] = ast.ArrayComprehensionTerm(x, ast.NewBody(ast.Assign.Expr(x, ast.NewTerm(ref))))
	}
	body := ast.NewBody(ast.Equality.Expr(ast.VarTerm("seed"), ast.ArrayTerm(items...)))
	pq, err := rego.New(
		rego.ParsedQuery(body),
		rego.Compiler(c),
		rego.Store(store),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("preparing tenant seed query: %w", err)
	}
	return &seedQuery{refs: refs, query: pq}, nil
}

func (q *seedQuery) refsOrNil() []ast.Ref {
	if q == nil {
		return nil
	}
	return q.refs
}

// newSeed evaluates the tenant-only rules for tenant. When the evaluation
// fails (complete is false) the seed is empty: every rule is then computed,
// and fails, as it would without seeds. Undefined rules are not seeded.
func (q *seedQuery) newSeed(ctx context.Context, tenant *ast.Term) (sd *seed, complete bool) {
	sd = &seed{tenant: tenant, cache: newRefCache(len(q.refsOrNil()))}
	if q == nil {
		return sd, true
	}
	input := ast.NewObject(ast.Item(ast.StringTerm("tenant"), tenant))
	var got *ast.Term
	_, err := q.query.Eval(ctx, rego.EvalParsedInput(input),
		rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) {
			got = t
			return nil, nil
		}))
	if err != nil || got == nil {
		return sd, false
	}
	arr, ok := got.Value.(*ast.Array)
	if !ok || arr.Len() != len(q.refs) {
		return sd, false
	}
	for i, ref := range q.refs {
		if v, ok := arr.Elem(i).Value.(*ast.Array); ok && v.Len() == 1 {
			sd.cache.Put(ref, v.Elem(0))
		}
	}
	return sd, true
}

// seedCache is the virtual cache of one evaluation: the tenant's seed
// (read-only, shared) in front of a fresh cache. Inside a `with` frame
// (depth > 0) input or data may be replaced, so the seed is not consulted.
type seedCache struct {
	seed  *refCache // shared, read-only
	live  *refCache
	depth int
}

var _ topdown.VirtualCache = (*seedCache)(nil)

func (c *seedCache) Push() {
	c.depth++
	c.live.Push()
}

func (c *seedCache) Pop() {
	c.depth--
	c.live.Pop()
}

func (c *seedCache) Get(ref ast.Ref) (*ast.Term, bool) {
	if c.depth == 0 {
		if v, _ := c.seed.Get(ref); v != nil {
			return v, false
		}
	}
	return c.live.Get(ref)
}

func (c *seedCache) Put(ref ast.Ref, value *ast.Term) { c.live.Put(ref, value) }

func (c *seedCache) Keys() []ast.Ref {
	keys := c.live.Keys()
	if c.depth == 0 {
		keys = append(keys, c.seed.Keys()...)
	}
	return keys
}

// appendTenantKey appends an exact encoding of the tenant's id, plan and
// policy data to b: two tenants get the same key only when their input
// documents are equal. It reports false for a value type it does not
// encode (that tenant is then decided without a seed).
func appendTenantKey(b []byte, t TenantInput) ([]byte, bool) {
	b = appendKeyString(b, t.ID)
	b = appendKeyString(b, t.Plan)
	if t.Data == nil {
		return append(b, 'n'), true
	}
	return appendKeyValue(b, t.Data)
}

func appendKeyString(b []byte, s string) []byte {
	b = append(b, 's')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

func appendKeyInt(b []byte, n int64) []byte {
	return append(strconv.AppendInt(append(b, 'i'), n, 10), ';')
}

func appendKeyValue(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, 'n'), true
	case bool:
		if x {
			return append(b, 't'), true
		}
		return append(b, 'f'), true
	case string:
		return appendKeyString(b, x), true
	case int:
		return appendKeyInt(b, int64(x)), true
	case int64:
		return appendKeyInt(b, x), true
	case uint64:
		return append(strconv.AppendUint(append(b, 'u'), x, 10), ';'), true
	case float64:
		return append(strconv.AppendFloat(append(b, 'g'), x, 'g', -1, 64), ';'), true
	case json.Number:
		return appendKeyString(append(b, 'j'), string(x)), true
	case []any:
		b = strconv.AppendInt(append(b, 'a'), int64(len(x)), 10)
		b = append(b, ':')
		for _, e := range x {
			var ok bool
			if b, ok = appendKeyValue(b, e); !ok {
				return b, false
			}
		}
		return b, true
	case []string:
		b = strconv.AppendInt(append(b, 'a'), int64(len(x)), 10)
		b = append(b, ':')
		for _, e := range x {
			b = appendKeyString(b, e)
		}
		return b, true
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = strconv.AppendInt(append(b, 'o'), int64(len(x)), 10)
		b = append(b, ':')
		for _, k := range keys {
			b = appendKeyString(b, k)
			var ok bool
			if b, ok = appendKeyValue(b, x[k]); !ok {
				return b, false
			}
		}
		return b, true
	default:
		return b, false
	}
}

// refCache is a topdown.VirtualCache keyed by whole refs: one hash lookup
// per Get, where OPA's own cache walks a trie level by level and allocates
// a node and a map per level on Put. Like OPA's, only the top frame is seen.
type refCache struct {
	frames []refFrame
}

// refFrame is one frame's entries by ref hash; a hash shared by two refs
// (rare) puts the later ones in more.
type refFrame struct {
	first map[int]refEntry
	more  []refEntry
}

// refEntry is one cached value; value nil records an undefined result.
type refEntry struct {
	ref   ast.Ref
	value *ast.Term
}

var _ topdown.VirtualCache = (*refCache)(nil)

func newRefCache(size int) *refCache {
	return &refCache{frames: []refFrame{{first: make(map[int]refEntry, size)}}}
}

// reset empties the cache for reuse, keeping the top frame's storage.
func (c *refCache) reset() {
	c.frames = c.frames[:1]
	clear(c.frames[0].first)
	c.frames[0].more = c.frames[0].more[:0]
}

func (c *refCache) Push() { c.frames = append(c.frames, refFrame{first: make(map[int]refEntry)}) }

func (c *refCache) Pop() { c.frames = c.frames[:len(c.frames)-1] }

func (f *refFrame) find(ref ast.Ref, h int) (refEntry, bool) {
	if e, ok := f.first[h]; ok {
		if e.ref.Equal(ref) {
			return e, true
		}
		for _, m := range f.more {
			if m.ref.Equal(ref) {
				return m, true
			}
		}
	}
	return refEntry{}, false
}

func (c *refCache) Get(ref ast.Ref) (*ast.Term, bool) { return c.get(ref, ref.Hash()) }

func (c *refCache) Put(ref ast.Ref, value *ast.Term) { c.put(ref, ref.Hash(), value) }

// get and put take the hash as an argument so tests can force collisions.
func (c *refCache) get(ref ast.Ref, h int) (*ast.Term, bool) {
	if e, ok := c.frames[len(c.frames)-1].find(ref, h); ok {
		return e.value, e.value == nil
	}
	return nil, false
}

func (c *refCache) put(ref ast.Ref, h int, value *ast.Term) {
	f := &c.frames[len(c.frames)-1]
	e, ok := f.first[h]
	switch {
	case !ok:
		f.first[h] = refEntry{ref: slices.Clone(ref), value: value}
	case e.ref.Equal(ref):
		e.value = value
		f.first[h] = e
	default:
		for i := range f.more {
			if f.more[i].ref.Equal(ref) {
				f.more[i].value = value
				return
			}
		}
		f.more = append(f.more, refEntry{ref: slices.Clone(ref), value: value})
	}
}

func (c *refCache) Keys() []ast.Ref {
	var keys []ast.Ref
	f := c.frames[len(c.frames)-1]
	for _, e := range f.first {
		keys = append(keys, e.ref)
	}
	for _, e := range f.more {
		keys = append(keys, e.ref)
	}
	return keys
}
