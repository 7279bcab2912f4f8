// Package decode is the strict decoder of the API's request bodies, shared
// by every transport (the HTTP routes, the MCP tools, `execgate policy
// eval`): the execute request, validate, prepare, the admin quota and
// policy dry-run bodies, and the tools query of GET /v1/tools. Every body
// first passes CheckJSON (nesting, UTF-8, surrogates); unknown keys are
// refused; every value is bounded; every error is an *execution.Error (400
// BadRequest or 413 PayloadTooLarge) naming the field. Reading a body off
// the wire (its byte cap, its deadline) is the transport's job.
package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
)

// Decoding is strict and names the field on every error: the body is first
// split into its top-level keys (unknown keys are refused), then each value
// is decoded on its own, recursively for nested objects. No error message
// of encoding/json is string-matched.

// Caps are the size limits a body is decoded under (server.max_*_bytes,
// server.max_json_depth).
type Caps struct {
	// Body caps a whole body, in bytes. The decoders do not read it: the
	// transport reads the body under it (an MCP tool call checks its
	// arguments against it).
	Body int64
	// Source caps a tool's source, in bytes.
	Source int
	// Args caps a run's encoded args, in bytes.
	Args int
	// Depth caps JSON nesting (CheckJSON); <= 0: DefaultMaxDepth.
	Depth int
}

// Value limits of an execute request.
const (
	maxListItems    = 64               // requirements, egress.allow, tools, fixtures.tools
	maxLimitTimeMS  = 24 * 3600 * 1000 // timeout_ms, cpu_ms
	maxLimitMB      = 1 << 20          // memory_mb, tmp_mb
	maxLimitPids    = 1 << 16          // pids
	maxLimitOutput  = int64(1) << 34   // output_bytes
	maxFixtureBytes = 1 << 20          // fixtures as a whole (also bounded by the body cap)
)

// MaxIDLen bounds an execution_id or a tenant_id.
const MaxIDLen = 128

// The validation patterns compile on first use (sync.OnceValue), not at
// package init: every execgate command links this package, and compiling
// them eagerly cost `execgate run` about 2 ms per start.
var (
	executionIDRe = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	identifierRe  = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	toolNameRe    = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_.-]{0,127}$`)
	toolGlobRe    = lazyRegexp(`^[A-Za-z0-9_*?][A-Za-z0-9_.*?-]{0,127}$`)
	egressHostRe  = lazyRegexp(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
)

// ValidExecutionID reports whether id is an execution_id the execute
// decoder accepts.
func ValidExecutionID(id string) bool { return executionIDRe().MatchString(id) }

func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// fieldFuncs decode one key each; path is the JSON path of the key.
type fieldFuncs map[string]func(path string, raw json.RawMessage) error

// decodeObject decodes raw as an object whose keys must all be in fs. A
// JSON null counts as absent.
func decodeObject(path string, raw json.RawMessage, fs fieldFuncs) error {
	where := path
	if where == "" {
		where = "body"
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return execution.BadRequest(where, "is empty; want a JSON object")
	}
	if !json.Valid(trimmed) {
		return execution.BadRequest(where, "is not valid JSON")
	}
	if trimmed[0] != '{' {
		return execution.BadRequest(where, "must be a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &m); err != nil {
		return execution.BadRequest(where, "must be a JSON object")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := fs[k]
		if !ok {
			return execution.BadRequest(join(path, k), "unknown field")
		}
		v := m[k]
		if isNull(v) {
			continue
		}
		if err := f(join(path, k), v); err != nil {
			return err
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// compact returns raw without insignificant whitespace (raw is valid JSON:
// decodeObject checked the whole body).
func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return append(json.RawMessage(nil), bytes.TrimSpace(raw)...)
	}
	return b.Bytes()
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func kindOf(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func decodeString(path string, raw json.RawMessage, dst *string) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return execution.BadRequest(path, "must be a string, got %s", kindOf(raw))
	}
	return nil
}

func decodeStrings(path string, raw json.RawMessage, dst *[]string) error {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return execution.BadRequest(path, "must be an array of strings, got %s", kindOf(raw))
	}
	if len(items) > maxListItems {
		return execution.BadRequest(path, "has %d items; at most %d", len(items), maxListItems)
	}
	out := make([]string, len(items))
	for i, it := range items {
		if err := decodeString(fmt.Sprintf("%s[%d]", path, i), it, &out[i]); err != nil {
			return err
		}
	}
	*dst = out
	return nil
}

func decodeInt(path string, raw json.RawMessage, max int64, dst *int64) error {
	t := bytes.TrimSpace(raw)
	if kindOf(t) != "a number" {
		return execution.BadRequest(path, "must be an integer, got %s", kindOf(t))
	}
	n, err := strconv.ParseInt(string(t), 10, 64)
	if err != nil {
		// 1.5, 1e3 or out of int64 range.
		return execution.BadRequest(path, "must be an integer, got %s", t)
	}
	if n < 0 {
		return execution.BadRequest(path, "must be >= 0, got %d", n)
	}
	if n > max {
		return execution.BadRequest(path, "%d is over the maximum %d", n, max)
	}
	*dst = n
	return nil
}

func oneOf(path, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return execution.BadRequest(path, "%q is not one of %s", v, strings.Join(allowed, ", "))
}

// Execute checks (CheckJSON), decodes and validates an execute request
// body. Defaults are filled (withRequestDefaults).
func Execute(body []byte, c Caps) (*execution.Request, error) {
	if err := CheckJSON(body, c.Depth); err != nil {
		return nil, err
	}
	return decodeExecuteFields(body, c)
}

// decodeExecuteFields decodes an execute request body CheckJSON accepted:
// each field on its own (executeFields), then the defaults, then the rules
// that tie fields together (checkExecute).
func decodeExecuteFields(body []byte, c Caps) (*execution.Request, error) {
	req := &execution.Request{}
	var sawSource bool
	if err := decodeObject("", body, executeFields(req, c, &sawSource)); err != nil {
		return nil, err
	}
	if !sawSource || req.Source == "" {
		return nil, execution.BadRequest("source", "is required")
	}
	withRequestDefaults(req)
	if err := checkExecute(req); err != nil {
		return nil, err
	}
	return req, nil
}

// executeFields decodes and validates each top-level field of an execute
// request into req; sawSource records that source was present.
func executeFields(req *execution.Request, c Caps, sawSource *bool) fieldFuncs {
	return fieldFuncs{
		"execution_id": func(p string, raw json.RawMessage) error {
			if err := decodeString(p, raw, &req.ExecutionID); err != nil {
				return err
			}
			if !executionIDRe().MatchString(req.ExecutionID) {
				return execution.BadRequest(p, "must be 1-%d characters of A-Z a-z 0-9 . _ : - starting with a letter or digit", MaxIDLen)
			}
			return nil
		},
		"tenant_id":  tenantIDField(&req.TenantID),
		"language":   languageField(&req.Language),
		"source":     sourceField(&req.Source, c.Source, sawSource),
		"entrypoint": entrypointField(&req.Entrypoint),
		"args": func(p string, raw json.RawMessage) error {
			raw = bytes.TrimSpace(raw)
			if len(raw) > c.Args {
				return execution.TooLarge(p, int64(len(raw)), int64(c.Args))
			}
			req.Args = compact(raw)
			return nil
		},
		"requirements":      requirementsField(&req.Requirements),
		"requirements_lock": lockField(&req.RequirementsLock),
		"environment_id":    environmentIDField(&req.EnvironmentID),
		"network_access": func(p string, raw json.RawMessage) error {
			if err := decodeString(p, raw, &req.NetworkAccess); err != nil {
				return err
			}
			return oneOf(p, req.NetworkAccess, "none", "proxy", "host")
		},
		"isolation": func(p string, raw json.RawMessage) error {
			if err := decodeString(p, raw, &req.Isolation); err != nil {
				return err
			}
			return oneOf(p, req.Isolation, sandbox.IsolationJail, sandbox.IsolationProcess)
		},
		"runtime": runtimeField(&req.Runtime),
		"egress":  egressField(&req.Egress),
		"limits": func(p string, raw json.RawMessage) error {
			return decodeLimits(p, raw, &req.Limits)
		},
		"mode": func(p string, raw json.RawMessage) error {
			if err := decodeString(p, raw, &req.Mode); err != nil {
				return err
			}
			return oneOf(p, req.Mode, "run", "test")
		},
		"tools":    toolsField(&req.Tools),
		"fixtures": fixturesField(&req.Fixtures),
		"secrets":  secretsField(&req.Secrets),
		"files":    filesField(&req.Files),
		"stdin":    stdinField(&req.Stdin, c.Args),
	}
}

// checkExecute applies the rules between the fields of a decoded request
// (defaults filled): fixtures only in test mode, egress hosts only with
// the proxy, at most one way of asking for packages, packages of the
// request's language.
func checkExecute(req *execution.Request) error {
	if req.Fixtures != nil && req.Mode != "test" {
		return execution.BadRequest("fixtures", `only allowed with mode "test"`)
	}
	if req.Egress != nil && len(req.Egress.Allow) > 0 && req.NetworkAccess != "proxy" {
		return execution.BadRequest("egress.allow", `only allowed with network_access "proxy"`)
	}
	if err := checkRuntime(req.Language, req.Runtime); err != nil {
		return err
	}
	if err := checkFixtureSecrets(req); err != nil {
		return err
	}
	if err := checkDepsChoice(req.Requirements, req.RequirementsLock, req.EnvironmentID); err != nil {
		return err
	}
	return checkPackages(req.Language, req.Requirements, req.RequirementsLock)
}

// checkRuntime refuses a runtime named for a language other than Python
// (a run's or a prepared environment's): JavaScript and TypeScript run on
// Deno whichever Python runtimes there are, and their npm packages do not
// depend on one.
func checkRuntime(language, runtime string) error {
	if runtime != "" && language != "python" {
		return execution.BadRequest("runtime", "only python runs name a runtime; %s runs choose by language", language)
	}
	return nil
}

// runtimeField decodes "runtime" into dst: a Python runtime of
// limits.Runtimes. Whether the tenant may use it is the policy's question.
func runtimeField(dst *string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		return oneOf(p, *dst, limits.Runtimes...)
	}
}

// checkFixtureSecrets: in test mode the secrets a request names take their
// values from fixtures.secrets, which holds exactly those.
func checkFixtureSecrets(req *execution.Request) error {
	var fixed map[string]string
	if req.Fixtures != nil {
		fixed = req.Fixtures.Secrets
	}
	if req.Mode == "test" {
		for i, name := range req.Secrets {
			if _, ok := fixed[name]; !ok {
				return execution.BadRequest(fmt.Sprintf("secrets[%d]", i), "%q has no value in fixtures.secrets (test mode never reads real secrets)", name)
			}
		}
	}
	for _, name := range sortedKeys(fixed) {
		if !slices.Contains(req.Secrets, name) {
			return execution.BadRequest("fixtures.secrets."+name, "is not asked for in secrets")
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// secretsField decodes the names of the brokered secrets a run asks for
// into dst: at most secrets.MaxPerRun valid names, each once.
func secretsField(dst *[]string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeStrings(p, raw, dst); err != nil {
			return err
		}
		if len(*dst) > secrets.MaxPerRun {
			return execution.BadRequest(p, "has %d secrets; at most %d", len(*dst), secrets.MaxPerRun)
		}
		for i, name := range *dst {
			switch {
			case !secrets.ValidName(name):
				return execution.BadRequest(fmt.Sprintf("%s[%d]", p, i), "%q is not a secret name (%s)", clipName(name), secrets.NameRule)
			case slices.Index(*dst, name) < i:
				return execution.BadRequest(fmt.Sprintf("%s[%d]", p, i), "%q is named twice", name)
			}
		}
		return nil
	}
}

// clipName bounds a caller's name in a message.
func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// tenantIDField decodes a tenant_id into dst: 1 to MaxIDLen bytes.
func tenantIDField(dst *string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		if *dst == "" || len(*dst) > MaxIDLen {
			return execution.BadRequest(p, "must be 1-%d characters", MaxIDLen)
		}
		return nil
	}
}

// languageField decodes the language into dst: one the sandbox runs.
func languageField(dst *string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		return oneOf(p, *dst, sandbox.Languages...)
	}
}

// egressField decodes {"allow": [host[:port] globs]} into *dst.
func egressField(dst **execution.EgressRequest) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		e := &execution.EgressRequest{}
		*dst = e
		return decodeObject(p, raw, fieldFuncs{
			"allow": func(p string, raw json.RawMessage) error {
				if err := decodeStrings(p, raw, &e.Allow); err != nil {
					return err
				}
				for i, h := range e.Allow {
					if err := checkEgressHost(h); err != nil {
						return execution.BadRequest(fmt.Sprintf("%s[%d]", p, i), "%q %v", h, err)
					}
				}
				return nil
			},
		})
	}
}

// toolsField decodes the tool names or globs a run narrows to into dst.
func toolsField(dst *[]string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeStrings(p, raw, dst); err != nil {
			return err
		}
		if len(*dst) > maxListItems {
			return execution.BadRequest(p, "has %d tools; at most %d", len(*dst), maxListItems)
		}
		for i, name := range *dst {
			if !toolGlobRe().MatchString(name) {
				return execution.BadRequest(fmt.Sprintf("%s[%d]", p, i), "%q is not a tool name or glob (\"server.tool\", \"server.*\")", name)
			}
		}
		return nil
	}
}

// ToolsQuery decodes the tools parameter of GET /v1/tools: comma-separated
// tool names or globs ("": none asked).
func ToolsQuery(q string) ([]string, error) {
	if q == "" {
		return nil, nil
	}
	asked := strings.Split(q, ",")
	if len(asked) > maxListItems {
		return nil, execution.BadRequest("tools", "has %d tools; at most %d", len(asked), maxListItems)
	}
	for i, t := range asked {
		if !toolGlobRe().MatchString(t) {
			return nil, execution.BadRequest(fmt.Sprintf("tools[%d]", i), "%q is not a tool name or glob", t)
		}
	}
	return asked, nil
}

// SplitCallback takes the fields only POST /v1/executions has
// (callback_url) out of body, leaving an execute body for Execute.
func SplitCallback(body []byte, c Caps) ([]byte, string, error) {
	if err := CheckJSON(body, c.Depth); err != nil {
		return nil, "", err
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return body, "", nil // not an object: the decoder says so
	}
	raw, ok := fields["callback_url"]
	if !ok {
		return body, "", nil
	}
	var callback string
	if err := decodeString("callback_url", raw, &callback); err != nil {
		return nil, "", err
	}
	delete(fields, "callback_url")
	rest, err := json.Marshal(fields)
	if err != nil {
		return nil, "", err
	}
	return rest, callback, nil
}

// fixturesField decodes test-mode fixtures (variables, canned tool
// returns) into *dst, within maxFixtureBytes.
func fixturesField(dst **execution.Fixtures) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if len(bytes.TrimSpace(raw)) > maxFixtureBytes {
			return execution.TooLarge(p, int64(len(raw)), maxFixtureBytes)
		}
		fx := &execution.Fixtures{}
		*dst = fx
		return decodeObject(p, raw, fieldFuncs{
			"variables": func(p string, raw json.RawMessage) error {
				if kindOf(raw) != "an object" {
					return execution.BadRequest(p, "must be an object, got %s", kindOf(raw))
				}
				fx.Variables = compact(raw)
				return nil
			},
			"tools": func(p string, raw json.RawMessage) error {
				var m map[string]json.RawMessage
				if kindOf(raw) != "an object" || json.Unmarshal(raw, &m) != nil {
					return execution.BadRequest(p, "must be an object mapping tool names to return values, got %s", kindOf(raw))
				}
				if len(m) > maxListItems {
					return execution.BadRequest(p, "has %d tools; at most %d", len(m), maxListItems)
				}
				for name := range m {
					if !toolNameRe().MatchString(name) {
						return execution.BadRequest(p, "%q is not a valid tool name", name)
					}
				}
				fx.Tools = m
				return nil
			},
			"secrets": fixtureSecretsField(&fx.Secrets),
		})
	}
}

// fixtureSecretsField decodes test mode's stand-in secret values into dst:
// names as for secrets, values text of at most secrets.MaxValueBytes.
func fixtureSecretsField(dst *map[string]string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		var m map[string]json.RawMessage
		if kindOf(raw) != "an object" || json.Unmarshal(raw, &m) != nil {
			return execution.BadRequest(p, "must be an object mapping secret names to values, got %s", kindOf(raw))
		}
		if len(m) > secrets.MaxPerRun {
			return execution.BadRequest(p, "has %d secrets; at most %d", len(m), secrets.MaxPerRun)
		}
		out := make(map[string]string, len(m))
		for _, name := range sortedKeys(m) {
			at := p + "." + name
			if !secrets.ValidName(name) {
				return execution.BadRequest(p, "%q is not a secret name (%s)", clipName(name), secrets.NameRule)
			}
			var v string
			if err := decodeString(at, m[name], &v); err != nil {
				return err
			}
			if len(v) > secrets.MaxValueBytes {
				return execution.TooLarge(at, int64(len(v)), secrets.MaxValueBytes)
			}
			if v == "" {
				return execution.BadRequest(at, "is empty")
			}
			if err := secrets.CheckText(v); err != nil {
				return execution.BadRequest(at, "%v", err)
			}
			out[name] = v
		}
		*dst = out
		return nil
	}
}

// checkSource applies the size cap and rejects what can never compile.
// sourceField decodes the tool source into dst and checks it against the
// cap; seen, when not nil, records that the field was present.
func sourceField(dst *string, limit int, seen *bool) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if seen != nil {
			*seen = true
		}
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		return checkSource(p, *dst, limit)
	}
}

// entrypointField decodes the entrypoint into dst: a Python identifier.
func entrypointField(dst *string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		if !identifierRe().MatchString(*dst) {
			return execution.BadRequest(p, "%q is not a Python identifier", *dst)
		}
		return nil
	}
}

func checkSource(path, src string, limit int) error {
	if len(src) > limit {
		return execution.TooLarge(path, int64(len(src)), int64(limit))
	}
	if !utf8.ValidString(src) {
		return execution.BadRequest(path, "is not valid UTF-8")
	}
	if strings.IndexByte(src, 0) >= 0 {
		return execution.BadRequest(path, "contains a NUL byte")
	}
	return nil
}

// checkEgressHost validates "host[:port]" or "*.domain[:port]".
func checkEgressHost(h string) error {
	host, port, hasPort := strings.Cut(h, ":")
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return errors.New("has an invalid port (want 1-65535)")
		}
	}
	if len(host) > 253 || !egressHostRe().MatchString(host) {
		return errors.New(`is not "host[:port]" or "*.domain[:port]"`)
	}
	return nil
}

func decodeLimits(path string, raw json.RawMessage, l *policy.Limits) error {
	return decodeObject(path, raw, fieldFuncs{
		"timeout_ms":   func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitTimeMS, &l.TimeoutMS) },
		"cpu_ms":       func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitTimeMS, &l.CPUMS) },
		"memory_mb":    func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitMB, &l.MemoryMB) },
		"pids":         func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitPids, &l.Pids) },
		"output_bytes": func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitOutput, &l.OutputBytes) },
		"tmp_mb":       func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitMB, &l.TmpMB) },
		// Counts and sizes: bounded like output_bytes (the policy caps them).
		"files":           func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitOutput, &l.Files) },
		"files_bytes":     func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitOutput, &l.FilesBytes) },
		"artifacts":       func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitOutput, &l.Artifacts) },
		"artifacts_bytes": func(p string, r json.RawMessage) error { return decodeInt(p, r, maxLimitOutput, &l.ArtifactsBytes) },
	})
}

// Validate decodes a validate request body.
func Validate(body []byte, c Caps) (*execution.ValidateRequest, error) {
	if err := CheckJSON(body, c.Depth); err != nil {
		return nil, err
	}
	req := &execution.ValidateRequest{}
	if err := decodeObject("", body, validateFields(req, c)); err != nil {
		return nil, err
	}
	if req.Source == "" {
		return nil, execution.BadRequest("source", "is required")
	}
	d := policy.Request{Language: req.Language, Entrypoint: req.Entrypoint}.WithDefaults()
	req.Language, req.Entrypoint = d.Language, d.Entrypoint
	return req, nil
}

// validateFields decodes and validates each field of a validate request
// into req.
func validateFields(req *execution.ValidateRequest, c Caps) fieldFuncs {
	return fieldFuncs{
		"source":     sourceField(&req.Source, c.Source, nil),
		"entrypoint": entrypointField(&req.Entrypoint),
		"language":   languageField(&req.Language),
	}
}

// Quota decodes a tenant quota object (PUT .../quota).
func Quota(body []byte) (quota.Limits, error) {
	var l quota.Limits
	var rate, burst, conc, daily, queued int64
	const maxQuota = 1 << 31
	if err := CheckJSON(body, DefaultMaxDepth); err != nil {
		return l, err
	}
	err := decodeObject("", body, fieldFuncs{
		"rate_per_minute":   func(p string, r json.RawMessage) error { return decodeInt(p, r, maxQuota, &rate) },
		"burst":             func(p string, r json.RawMessage) error { return decodeInt(p, r, maxQuota, &burst) },
		"concurrency":       func(p string, r json.RawMessage) error { return decodeInt(p, r, maxQuota, &conc) },
		"daily_cpu_seconds": func(p string, r json.RawMessage) error { return decodeInt(p, r, maxQuota, &daily) },
		"max_queued":        func(p string, r json.RawMessage) error { return decodeInt(p, r, maxQuota, &queued) },
	})
	if err != nil {
		return l, err
	}
	l = quota.Limits{RatePerMinute: int(rate), Burst: int(burst), Concurrency: int(conc), DailyCPUSeconds: daily, MaxQueued: int(queued)}
	if err := l.Validate(); err != nil {
		return l, execution.BadRequest("body", "%v", err)
	}
	return l, nil
}

// Evaluate decodes an admin dry-run body; the embedded execute request is
// validated exactly like POST /v1/execute.
func Evaluate(body []byte, c Caps) (tenant string, roles []string, req *execution.Request, err error) {
	if err := CheckJSON(body, c.Depth); err != nil {
		return "", nil, nil, err
	}
	var rawReq json.RawMessage
	err = decodeObject("", body, fieldFuncs{
		"tenant_id": func(p string, raw json.RawMessage) error { return decodeString(p, raw, &tenant) },
		"roles":     func(p string, raw json.RawMessage) error { return decodeStrings(p, raw, &roles) },
		"request": func(p string, raw json.RawMessage) error {
			rawReq = raw
			return nil
		},
	})
	if err != nil {
		return "", nil, nil, err
	}
	if tenant == "" {
		return "", nil, nil, execution.BadRequest("tenant_id", "is required")
	}
	if rawReq == nil {
		return "", nil, nil, execution.BadRequest("request", "is required")
	}
	req, err = decodeExecuteFields(rawReq, c)
	if err != nil {
		var ae *execution.Error
		if errors.As(err, &ae) && !strings.HasPrefix(ae.Message, "request") {
			cp := *ae
			cp.Message = "request." + ae.Message
			if strings.HasPrefix(ae.Message, "body:") {
				cp.Message = "request" + strings.TrimPrefix(ae.Message, "body")
			}
			return "", nil, nil, &cp
		}
		return "", nil, nil, err
	}
	return tenant, roles, req, nil
}

// withRequestDefaults fills what r left out with the policy's request
// defaults (policy.Request.WithDefaults: language python, entrypoint run,
// network none, mode run). The decoders call it once; nothing below
// re-defaults.
func withRequestDefaults(r *execution.Request) {
	d := policy.Request{Language: r.Language, Entrypoint: r.Entrypoint, NetworkAccess: r.NetworkAccess, Mode: r.Mode, Isolation: r.Isolation}.WithDefaults()
	r.Language, r.Entrypoint, r.NetworkAccess, r.Mode, r.Isolation = d.Language, d.Entrypoint, d.NetworkAccess, d.Mode, d.Isolation
}
