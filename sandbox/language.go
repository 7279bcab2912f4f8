package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/execgate/execgate/internal/hostbin"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/harness"
	"github.com/execgate/execgate/sourcecheck"
)

// Languages a Spec may ask for (DESIGN §14). JavaScript and TypeScript run
// under Deno, in a jail of the Deno runtime's own profile; Python under the
// rootfs's python3.
const (
	LanguagePython     = "python"
	LanguageJavaScript = "javascript"
	LanguageTypeScript = "typescript"
)

// Languages lists every language this runner knows, in a stable order.
var Languages = []string{LanguagePython, LanguageJavaScript, LanguageTypeScript}

// jailRuntime is what a jail runs: the profile of a JavaScript jail differs
// from a Python one (its command, its address-space limit, its
// environment), not by language: JavaScript and TypeScript share the Deno
// jails.
type jailRuntime string

const (
	runtimePython jailRuntime = "python"
	// runtimeDeno runs Deno directly on the harness: a warm jail is a
	// started Deno waiting for its request on stdin.
	runtimeDeno jailRuntime = "deno"
	// runtimeDenoCheck is mode validate: the launcher (python3,
	// execgate_deno.py) writes the source into the jail's tmpfs and runs
	// `deno check` on it.
	runtimeDenoCheck jailRuntime = "deno-check"
)

func (rt jailRuntime) deno() bool { return rt == runtimeDeno || rt == runtimeDenoCheck }

// runtimeOf maps a (normalised) language and mode to the runtime.
func runtimeOf(language, mode string) jailRuntime {
	switch {
	case language != LanguageJavaScript && language != LanguageTypeScript:
		return runtimePython
	case mode == ModeValidate:
		return runtimeDenoCheck
	}
	return runtimeDeno
}

// What V8 needs from the jail (measured on Deno 2.9.8, see README
// "JavaScript and TypeScript"):
const (
	// denoRlimitASMB: V8 reserves large virtual ranges (its pointer cage and
	// code range) at start and aborts under 64 GiB of address space.
	// Memory is bounded by the run's memory cgroup, as for Python; only
	// RLIMIT_AS differs, and only in the Deno profile.
	denoRlimitASMB = 64 << 10
	// denoHeapHeadMB is left to Deno outside V8's old space (its own
	// allocations, code, young generation): the heap limit is the memory
	// limit minus this, at least denoMinHeapMB.
	denoHeapHeadMB = 48
	denoMinHeapMB  = 16
	// denoMinPids: Deno does not start with 2 pids (measured). On the
	// development VM's 6.18 kernel it runs with 4, starting fewer threads;
	// on Debian 12's 6.1 kernel (the cgroup v2 VM) it needs 7: with 5 it
	// exits "unable to create worker threads", with 4 and 6 it hangs until
	// the wall limit (scripts/vm-test.sh, 2 CPUs). It runs about 7 on 2
	// CPUs when it may; 8 leaves one for a thread the tool starts.
	denoMinPids = 8
)

// denoHeapMB is the V8 old-space limit (--max-old-space-size) for a run
// with memoryMB of memory: a heap that outgrows it ends as V8's "Fatal
// JavaScript out of memory" (SIGTRAP), reported as MemoryLimit.
func denoHeapMB(memoryMB int64) int64 {
	return max(memoryMB-denoHeapHeadMB, denoMinHeapMB)
}

// denoFlags are Deno's flags for every run: no --allow-* flag but reading
// the run's /workspace (its input files), writing /workspace/out (its
// artifacts), and reading and writing the run's secrets directory
// (jaillayout.SecretsDir, its own tmpfs: the harness writes the run's
// brokered secrets there and revokes the write permission before the tool
// loads; the tool may read them); every other permission denied and
// nothing prompted, nothing fetched or written (--no-remote --no-npm
// --cached-only --no-lock), no configuration file discovered
// (--no-config), and the import map that blocks every file:, node:, npm:,
// jsr: and remote specifier.
var denoFlags = []string{
	"--allow-read=" + jaillayout.WorkspaceDir, "--allow-write=" + jaillayout.WorkspaceOutDir,
	"--no-remote", "--no-npm", "--cached-only", "--no-config", "--no-lock", "--no-prompt",
	"--allow-read=" + jaillayout.SecretsDir, "--allow-write=" + jaillayout.SecretsDir,
	"--import-map=" + harness.Dir + "/" + harness.ImportMap,
}

// denoEnv is added to jailEnv in the Deno runtimes: the read-only cache
// directory (Deno refuses to start without one), no colours, no update
// check.
var denoEnv = []string{
	"DENO_DIR=" + jaillayout.DenoDir,
	"NO_COLOR=1",
	"DENO_NO_UPDATE_CHECK=1",
}

// denoCommand is the exec_bin of a Deno runtime: Deno on the harness, with
// V8's heap limited and code generation from strings (eval, new Function)
// disallowed; or, for mode validate, the launcher (execgate_deno.py) that
// runs `deno check` with the same flags.
func denoCommand(rt jailRuntime, l Limits) (string, []string) {
	if rt == runtimeDenoCheck {
		return jaillayout.PythonPath, []string{"-I", "-S", "-B", "-u", harness.Dir + "/" + harness.DenoEntry}
	}
	args := append([]string{"run"}, denoFlags...)
	args = append(args,
		"--v8-flags=--max-old-space-size="+strconv.FormatInt(denoHeapMB(l.MemoryMB), 10)+",--disallow-code-generation-from-strings",
		harness.Dir+"/"+harness.JSEntry)
	return jaillayout.DenoPath, args
}

// EnvDeno names the environment variable that points at the host's Deno
// binary (the one the rootfs builder copies into the tree).
const EnvDeno = hostbin.EnvDeno

var denoSetupHint = hostbin.Deno.Hint

// FindDeno locates the host's Deno binary for the rootfs builder, the way
// FindNsjail finds nsjail: configured, $EXECGATE_DENO, .tools/bin/deno,
// $PATH. execgate never runs it on the host: it is copied into the rootfs
// and run only in jails.
func FindDeno(configured string) (string, error) {
	return findTool(hostbin.Deno, configured, os.Getenv, os.Executable, os.Getwd, exec.LookPath)
}

// ModeValidate (JavaScript and TypeScript only) runs no tool: the jail
// type-checks the source with `deno check` and the result is
// {"valid": bool, "errors": [{"line", "col", "message"}]}.
const ModeValidate = "validate"

// checkDenoSpec is what a Deno run cannot do (yet): Deno runs with
// --allow-net denied, so there is no network mode but none; requirements
// are Python packages.
func checkDenoSpec(spec Spec) []error {
	var errs []error
	if spec.Network != NetworkNone {
		errs = append(errs, fmt.Errorf("network: %s tools run with every Deno permission denied, so network %q is not available (none only)", spec.Language, spec.Network))
	}
	if spec.Deps != "" {
		errs = append(errs, fmt.Errorf("requirements: %s tools cannot install packages (imports are closed)", spec.Language))
	}
	if p := spec.Limits.Pids; p > 0 && p < denoMinPids {
		errs = append(errs, fmt.Errorf("limits.pids: %d is below %s's minimum of %d (Deno's threads count)", p, spec.Language, denoMinPids))
	}
	return errs
}

// ErrNoDeno: the rootfs has no Deno, so JavaScript and TypeScript cannot run.
var ErrNoDeno = errors.New("rootfs has no deno")

// denoReady checks that the rootfs carries Deno (a rootfs built on a host
// without it has none).
func denoReady(rootfsDir string) error {
	if _, err := os.Stat(filepath.Join(rootfsDir, jaillayout.DenoPath)); err != nil {
		return &UnavailableError{
			Reason: fmt.Sprintf("the rootfs at %s has no Deno, so JavaScript and TypeScript tools cannot run", rootfsDir),
			Hint:   denoSetupHint + "; then rebuild the rootfs (`execgate rootfs build`, or restart: serve and run rebuild it)",
			Err:    ErrNoDeno,
		}
	}
	return nil
}

// importRefusal is the result of a run refused by the import check: for
// mode validate the verdict (valid false, the problems), otherwise
// InvalidSource at the first problem.
func importRefusal(mode string, problems []sourcecheck.Problem) Result {
	if mode == ModeValidate {
		verdict, _ := json.Marshal(struct {
			Valid  bool                  `json:"valid"`
			Errors []sourcecheck.Problem `json:"errors"`
		}{false, problems})
		return Result{Status: StatusOK, Result: verdict}
	}
	first := problems[0]
	msg := first.Message
	if n := len(problems) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return Result{Status: StatusError, Result: json.RawMessage("null"), Error: &ErrorInfo{Type: ErrInvalidSource, Message: msg, Line: first.Line, Column: first.Col}}
}

// WithoutImportCheck runs JavaScript and TypeScript tools without the
// import check, leaving the import map in the jail as the only wall. It is
// for trusted probes that prove that wall holds (rootfs verify imports
// node:fs and must see it refused in the jail); a runner serving tenants'
// tools never takes it.
func WithoutImportCheck() Option {
	return func(r *Runner) { r.importsUnchecked = true }
}
