package execution

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// validatorSource is the fixed tool behind Validate (POST /v1/validate, the
// MCP validate tool). It parses and compiles the caller's source (compile
// of an AST runs nothing of it) and looks for the entrypoint among the
// module's top-level names. It runs in
// the jail like any tool: user-influenced text is never handled by a host
// interpreter.
const validatorSource = `import ast


def _problem(line, col, message):
    return {"line": int(line or 0), "col": int(col or 0), "message": str(message)}


def run(args, context):
    source = args["source"]
    entrypoint = args["entrypoint"]
    try:
        tree = ast.parse(source, filename="<tool>", mode="exec")
        compile(tree, "<tool>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return {"valid": False, "errors": [_problem(e.lineno, e.offset, e.msg)]}
    except (ValueError, RecursionError, MemoryError) as e:
        return {"valid": False, "errors": [_problem(0, 0, "%s: %s" % (type(e).__name__, e))]}
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add(a.asname or a.name.split(".")[0])
    if entrypoint not in names:
        return {"valid": False, "errors": [_problem(0, 0, "entrypoint %r is not defined at module level" % entrypoint)]}
    return {"valid": True, "errors": []}
`

// validatorLimits bound the validator run.
var validatorLimits = sandbox.Limits{TimeoutMS: 5000, CPUMS: 5000, MemoryMB: 256, Pids: 8, OutputBytes: 1 << 20, TmpMB: 8}.Or(limits.Default)

// denoValidatorLimits bound `deno check` of a JavaScript or TypeScript
// source: the TypeScript checker loads its lib types first (about 3 s of
// CPU on a loaded 2-core host), and Deno runs a few threads.
var denoValidatorLimits = sandbox.Limits{TimeoutMS: 30000, CPUMS: 30000, MemoryMB: 512, Pids: 32, OutputBytes: 1 << 20, TmpMB: 8}.Or(limits.Default)

// ValidateRequest is a request to check a tool's source (POST
// /v1/validate, the MCP validate tool).
type ValidateRequest struct {
	Source     string `json:"source"`
	Entrypoint string `json:"entrypoint,omitempty"`
	Language   string `json:"language,omitempty"` // python (default), javascript, typescript
}

// ValidateResponse says whether the source compiles and defines the
// entrypoint. Nothing of the tool is run.
type ValidateResponse struct {
	Valid  bool            `json:"valid"`
	Errors []SourceProblem `json:"errors"`
}

// SourceProblem is one problem found in a source; Line and Col are 1-based,
// 0 when the problem is not tied to a position.
type SourceProblem struct {
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

// Validate checks req's source for tenant (decoded, defaults filled, the
// caller authorised): the Python checker (validatorSource) or `deno check`
// runs it in the jail like any tool, through the run queue and quota (it
// is a run), and nothing of the tool is run. A checker that hit a limit is
// an invalid answer saying so; the error is a refusal or the sandbox's.
func (f *Flow) Validate(ctx context.Context, tenant tenancy.Tenant, req *ValidateRequest) (*ValidateResponse, error) {
	args, err := json.Marshal(map[string]string{"source": req.Source, "entrypoint": req.Entrypoint})
	if err != nil {
		return nil, fmt.Errorf("encoding validator args: %w", err)
	}
	id := "validate-" + NewID()
	spec := sandbox.Spec{
		ExecutionID: id,
		TenantID:    tenant.ID,
		Language:    "python",
		Source:      validatorSource,
		Entrypoint:  "run",
		Args:        args,
		Mode:        "run",
		Network:     sandbox.NetworkNone,
		Limits:      validatorLimits,
	}
	if req.Language == sandbox.LanguageJavaScript || req.Language == sandbox.LanguageTypeScript {
		// deno check in the jail: syntax and type errors, nothing run.
		spec.Language, spec.Source, spec.Entrypoint, spec.Args = req.Language, req.Source, req.Entrypoint, nil
		spec.Mode, spec.Limits = sandbox.ModeValidate, denoValidatorLimits
	}
	// The quota reserves the Python checker's CPU for either checker.
	res, err := f.runSpec(ctx, tenant, spec, validatorLimits.CPUMS)
	if err != nil {
		return nil, err
	}
	if res.Status != sandbox.StatusOK {
		// The parser itself hit a limit (e.g. absurd nesting): the source
		// cannot be accepted, and the caller learns why.
		msg := "the source could not be checked"
		if res.Error != nil {
			msg = fmt.Sprintf("the source could not be checked: %s: %s", res.Error.Type, res.Error.Message)
		}
		return &ValidateResponse{Valid: false, Errors: []SourceProblem{{Message: msg}}}, nil
	}
	var out ValidateResponse
	if err := json.Unmarshal(res.Result, &out); err != nil {
		return nil, fmt.Errorf("decoding validator result: %w", err)
	}
	if out.Errors == nil {
		out.Errors = []SourceProblem{}
	}
	return &out, nil
}
