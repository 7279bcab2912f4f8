// Package mcpserver is execgate as an MCP server (DESIGN §14): the tools
// execute_<language> and validate over the execute flow (package
// execution), on the streamable HTTP transport of the official Go SDK. The
// gateway mounts it at POST /mcp behind its edge (token, access row,
// connection caps, refusal limit, body cap), so agents connect with one
// URL and the same bearer token as the HTTP API.
//
// Stateless: every POST is a whole exchange (the SDK's Stateless mode, JSON
// responses, no Mcp-Session-Id, GET and DELETE answer 405). Nothing is kept
// between calls, so there are no sessions to bound per tenant, any replica
// can answer any call, and a restart loses nothing. A tool call needs no
// server-to-client messages (no sampling, no elicitation), which is what
// sessions would buy.
//
// The tools go through the same flow as the HTTP routes, in process:
//
//   - /mcp itself is a row of the gateway's access table (executor of its
//     own tenant), checked before the SDK sees the request; the caller is
//     the one the gateway authenticated (tenancy.PrincipalFrom).
//   - execute_<language> runs the execute flow (execution.Flow.Run) with
//     the /v1/execute row's grants: the same strict decoder (package
//     decode) and caps, policy, idempotency (an execution_id in the
//     arguments), queue, quota, sandbox, settlement and one audit record
//     under the caller's tenant.
//   - validate calls the /v1/validate flow (execution.Flow.Validate) with
//     that row's grants.
//
// A run's artifacts are in the envelope; an image among them that the
// envelope carries inline is also an image content of the result, and the
// text part names them all (artifacts.go).
//
// A refusal (PolicyDenied, QuotaExceeded, a bad argument) and a run that
// ended in error are tool errors (isError), not protocol errors, so the
// agent sees them. The result carries the envelope (validate: its answer)
// as structuredContent and a human-readable text part; a 429's Retry-After
// is in the text and in _meta.retry_after_seconds.
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
)

// Flow runs and validates tools (*execution.Flow).
type Flow interface {
	Run(ctx context.Context, call execution.Call) *execution.Outcome
	Validate(ctx context.Context, tenant tenancy.Tenant, req *execution.ValidateRequest) (*execution.ValidateResponse, error)
}

var _ Flow = (*execution.Flow)(nil)

// Tenants authorises a caller for a tenant (*tenancy.Registry).
type Tenants interface {
	Authorize(p tenancy.Principal, target string, grants []tenancy.Grant) (tenancy.Tenant, error)
}

var _ Tenants = (*tenancy.Registry)(nil)

// Deps are what a Server uses; all but Logger are required.
type Deps struct {
	Flow    Flow
	Tenants Tenants
	// ExecuteGrants and ValidateGrants are who may call execute_<language>
	// and validate: the gateway's access rows of POST /v1/execute and POST
	// /v1/validate (none: every call refused).
	ExecuteGrants, ValidateGrants []tenancy.Grant
	// Logger gets the unexpected failures of validate. Nil: slog.Default().
	Logger *slog.Logger
}

// Server is the MCP server: an http.Handler of the streamable HTTP
// transport for an authenticated caller. It keeps nothing between requests
// and is safe for concurrent use.
type Server struct {
	caps    decode.Caps
	d       Deps
	handler http.Handler
}

// FramingBytes is what the JSON-RPC envelope of a tool call may add to the
// largest execute body (decode.Caps.Body) on the wire: the gateway reads
// an MCP request under Body + FramingBytes.
const FramingBytes = 64 << 10

// mcpLanguages are the languages with an execute_<language> tool (DESIGN
// §14: execute_python, execute_javascript; TypeScript is the javascript
// tool's language field over HTTP, not a tool of its own).
var mcpLanguages = []string{"python", "javascript"}

// entrypointSketch says, per language, what the source defines.
var entrypointSketch = map[string]string{
	"python":     "def run(args, context) (or async def run)",
	"javascript": "export function run(args, context) (named or default export, sync or async)",
}

// principalKey is where the verifier passes the caller to the tools
// (TokenInfo.Extra).
const principalKey = "execgate.principal"

// spanContextKey passes the HTTP request's span context to the tools, so
// their spans, envelope trace_id and audit record join the request's trace.
const spanContextKey = "execgate.span_context"

// New builds the MCP server; caps are the execute body's (the arguments
// of a tool call are decoded under them).
func New(caps decode.Caps, d Deps) *Server {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	s := &Server{caps: caps, d: d}
	srv := mcp.NewServer(&mcp.Implementation{Name: "execgate", Title: "execgate code execution", Version: "v1"},
		&mcp.ServerOptions{Instructions: "Run short tools in execgate's sandbox under your tenant's policy and quotas. " +
			"A tool is Python source defining def run(args, context) (or async def); its return value must be JSON-serialisable."})
	for _, lang := range mcpLanguages {
		srv.AddTool(executeTool(lang), s.mcpExecute(lang))
	}
	srv.AddTool(&mcp.Tool{
		Name:        "validate",
		Title:       "Check a tool's source",
		Description: "Parse and compile Python source in the sandbox and check that it defines the entrypoint. Nothing of the tool is run.",
		InputSchema: json.RawMessage(validateInputSchema),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, s.mcpValidate)

	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	// The SDK hands TokenInfo to every tool call; the gateway already
	// verified the token, so the verifier only passes the caller on.
	withCaller := mcpauth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*mcpauth.TokenInfo, error) {
		p, ok := tenancy.PrincipalFrom(r.Context())
		if !ok {
			return nil, fmt.Errorf("%w: no authenticated caller", mcpauth.ErrInvalidToken)
		}
		return &mcpauth.TokenInfo{UserID: p.TenantID + "/" + p.Subject, Scopes: p.Roles, Extra: map[string]any{
			principalKey:   p,
			spanContextKey: trace.SpanContextFromContext(r.Context()),
		}}, nil
	}, &mcpauth.RequireBearerTokenOptions{AllowMissingExpiration: true}) // exp was checked by the gateway
	s.handler = withCaller(h)
	return s
}

// ServeHTTP serves one MCP exchange of the caller in r's context
// (tenancy.WithPrincipal); without one it is 401 and no tool is called.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// executeTool is the execute_<language> tool.
func executeTool(lang string) *mcp.Tool {
	return &mcp.Tool{
		Name:  "execute_" + lang,
		Title: "Run a " + lang + " tool in the sandbox",
		Description: "Run " + lang + " source in execgate's sandbox, as POST /v1/execute does: the source defines " +
			entrypointSketch[lang] + ", called with args; it returns a JSON-serialisable value. " +
			"The result is the execution envelope (status, result, stdout, stderr, error, usage, decision, artifacts). " +
			"Files the tool writes to /workspace/out (a matplotlib figure saved with plt.savefig(\"/workspace/out/chart.png\")) come back as artifacts; small PNG, JPEG, GIF and WebP images as image content. " +
			"Reuse an execution_id to retry safely: a repeated id returns the first run's answer and never runs twice.",
		InputSchema: json.RawMessage(executeInputSchema(lang)),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)},
	}
}

// executeInputSchema is execute_<lang>'s input schema: execute_python
// also takes the runtime.
func executeInputSchema(lang string) string {
	runtime := ""
	if lang == sandbox.LanguagePython {
		runtime = `
    "runtime": {"type": "string", "enum": ["` + strings.Join(limits.Runtimes, `", "`) + `"], "description": "the Python runtime (python3.11, python3.13; GET /v1/runtimes lists them); default: the tenant's, if policy grants it"},`
	}
	return strings.Replace(executeInputSchemaBase, "\n    \"fixtures\"", runtime+"\n    \"fixtures\"", 1)
}

// The tools' input schemas: the execute and validate request bodies without
// the fields the tool sets (language) or that only HTTP callers need
// (tenant_id: the token's). The decoder stays the authority on values.
const executeInputSchemaBase = `{
  "type": "object",
  "properties": {
    "source": {"type": "string", "description": "the tool's source"},
    "entrypoint": {"type": "string", "description": "the function to call (default run)"},
    "args": {"description": "any JSON, passed as args"},
    "execution_id": {"type": "string", "description": "idempotency key: a retry with the same id returns the first result"},
    "requirements": {"type": "array", "items": {"type": "string"}, "description": "packages, if policy allows: PEP 508 requirements for python (six==1.16.0), npm packages with exact versions for javascript (left-pad@1.3.0)"},
    "network_access": {"type": "string", "enum": ["none", "proxy", "host"]},
    "egress": {"type": "object", "properties": {"allow": {"type": "array", "items": {"type": "string"}}}},
    "limits": {"type": "object", "properties": {
      "timeout_ms": {"type": "integer"}, "cpu_ms": {"type": "integer"}, "memory_mb": {"type": "integer"},
      "pids": {"type": "integer"}, "output_bytes": {"type": "integer"}, "tmp_mb": {"type": "integer"},
      "files": {"type": "integer"}, "files_bytes": {"type": "integer"}, "artifacts": {"type": "integer"}, "artifacts_bytes": {"type": "integer"}}},
    "files": {"type": "array", "description": "input files, read-only under /workspace (the tool's working directory)", "items": {"type": "object", "properties": {
      "path": {"type": "string", "description": "relative, e.g. data/in.csv"}, "content": {"type": "string"},
      "encoding": {"type": "string", "enum": ["utf8", "base64"]}}, "required": ["path", "content"]}},
    "stdin": {"type": "string", "description": "the tool's standard input"},
    "mode": {"type": "string", "enum": ["run", "test"]},
    "isolation": {"type": "string", "enum": ["jail", "process"], "description": "jail (default): a fresh jail per run; process: a fresh process forked from the tenant's warm jail, if policy grants it"},
    "secrets": {"type": "array", "items": {"type": "string"}, "description": "brokered secrets the run asks for by name, if policy grants them: the tool reads context.secrets[NAME]; their values never come back (masked as ***)"},
    "fixtures": {"type": "object"}
  },
  "required": ["source"],
  "additionalProperties": false
}`

const validateInputSchema = `{
  "type": "object",
  "properties": {
    "source": {"type": "string"},
    "entrypoint": {"type": "string", "description": "default run"}
  },
  "required": ["source"],
  "additionalProperties": false
}`

// mcpExecute is the handler of execute_<lang>.
func (s *Server) mcpExecute(lang string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p, ctx, err := mcpCaller(ctx, req)
		if err != nil {
			return nil, err
		}
		out := s.d.Flow.Run(ctx, execution.Call{
			Principal: p,
			Grants:    s.d.ExecuteGrants,
			ID:        execution.NewID(),
			Body:      func() ([]byte, error) { return s.mcpExecuteBody(req.Params.Arguments, lang) },
			Decode:    func(body []byte) (*execution.Request, error) { return decode.Execute(body, s.caps) },
		})
		defer out.Release()
		text := envelopeText(out.Envelope, out.RetryAfter)
		images, listed := artifactContent(out.Envelope)
		if listed != "" {
			text += "\n" + listed
		}
		res := &mcp.CallToolResult{
			Content:           append([]mcp.Content{&mcp.TextContent{Text: text}}, images...),
			StructuredContent: out.Envelope,
			IsError:           out.Envelope.Status != sandbox.StatusOK,
		}
		if out.RetryAfter > 0 {
			res.Meta = mcp.Meta{"retry_after_seconds": execution.RetryAfterSeconds(out.RetryAfter)}
		}
		return res, nil
	}
}

// mcpExecuteBody is the execute request body of a tool call's arguments:
// the arguments object with the tool's language.
func (s *Server) mcpExecuteBody(args json.RawMessage, lang string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(args, &fields); err != nil || fields == nil {
		return nil, execution.BadRequest("arguments", "must be a JSON object")
	}
	if _, ok := fields["language"]; ok {
		return nil, execution.BadRequest("language", "is set by the tool (execute_%s); leave it out", lang)
	}
	fields["language"], _ = json.Marshal(lang)
	body, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encoding the execute body: %w", err)
	}
	if int64(len(body)) > s.caps.Body {
		return nil, execution.TooLarge("arguments", int64(len(body)), s.caps.Body)
	}
	return body, nil
}

// mcpValidate is the handler of validate.
func (s *Server) mcpValidate(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p, ctx, err := mcpCaller(ctx, req)
	if err != nil {
		return nil, err
	}
	resp, err := s.mcpValidateCall(ctx, p, req.Params.Arguments)
	if err != nil {
		ae := execution.Refusal(err)
		if !ae.Expected() {
			s.d.Logger.ErrorContext(ctx, "mcp validate failed", telemetry.KeyTenantID, p.TenantID, "error_type", ae.Type, "err", ae.Error())
		}
		body := execution.ErrorResponse{Status: "error", Error: ae.Body()}
		res := &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: errorText(&body.Error, ae.RetryAfter)}},
			StructuredContent: body,
			IsError:           true,
		}
		if ae.RetryAfter > 0 {
			res.Meta = mcp.Meta{"retry_after_seconds": execution.RetryAfterSeconds(ae.RetryAfter)}
		}
		return res, nil
	}
	text := "valid"
	if !resp.Valid {
		var b strings.Builder
		b.WriteString("not valid:")
		for _, e := range resp.Errors {
			fmt.Fprintf(&b, "\n  line %d, col %d: %s", e.Line, e.Col, e.Message)
		}
		text = b.String()
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: resp}, nil
}

// mcpValidateCall authorises, decodes and runs a validate call.
func (s *Server) mcpValidateCall(ctx context.Context, p tenancy.Principal, args json.RawMessage) (*execution.ValidateResponse, error) {
	tenant, err := s.d.Tenants.Authorize(p, "", s.d.ValidateGrants)
	if err != nil {
		return nil, err
	}
	if int64(len(args)) > s.caps.Body {
		return nil, execution.TooLarge("arguments", int64(len(args)), s.caps.Body)
	}
	req, err := decode.Validate(args, s.caps)
	if err != nil {
		return nil, err
	}
	return s.d.Flow.Validate(ctx, tenant, req)
}

// mcpCaller is the caller of a tool call, and ctx joined to the HTTP
// request's trace. No caller cannot happen behind the bearer-token check
// of New; it is a protocol error, never a run.
func mcpCaller(ctx context.Context, req *mcp.CallToolRequest) (tenancy.Principal, context.Context, error) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return tenancy.Principal{}, ctx, fmt.Errorf("no authenticated caller")
	}
	p, ok := req.Extra.TokenInfo.Extra[principalKey].(tenancy.Principal)
	if !ok {
		return tenancy.Principal{}, ctx, fmt.Errorf("no authenticated caller")
	}
	if sc, ok := req.Extra.TokenInfo.Extra[spanContextKey].(trace.SpanContext); ok && sc.IsValid() && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	return p, tenancy.WithPrincipal(ctx, p), nil
}

// envelopeText is the human-readable part of an execute tool result.
func envelopeText(env *execution.Envelope, retryAfter time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "execution %s: %s", env.ExecutionID, env.Status)
	if env.Status == sandbox.StatusOK {
		fmt.Fprintf(&b, "\nresult: %s", orNull(env.Result))
	} else if env.Error != nil {
		b.WriteString("\n" + errorText(env.Error, retryAfter))
	}
	for _, out := range []struct{ name, text string }{{"stdout", env.Stdout}, {"stderr", env.Stderr}} {
		if out.text != "" {
			fmt.Fprintf(&b, "\n%s:\n%s", out.name, strings.TrimRight(out.text, "\n"))
		}
	}
	return b.String()
}

// errorText renders an error body for people.
func errorText(e *execution.ErrorBody, retryAfter time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Type, e.Message)
	for _, r := range e.Reasons {
		b.WriteString("\n  - " + r)
	}
	if retryAfter > 0 {
		b.WriteString("\nretry after " + execution.RetryAfterSeconds(retryAfter) + " s")
	}
	if e.Traceback != "" {
		b.WriteString("\n" + strings.TrimRight(e.Traceback, "\n"))
	}
	return b.String()
}

func orNull(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	return string(raw)
}

func ptr[T any](v T) *T { return &v }
