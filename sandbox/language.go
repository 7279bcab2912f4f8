package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

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

// denoFlags are Deno's flags for a jail of profile p. Every run: nothing
// fetched or written (--no-remote --cached-only --no-lock), no
// configuration file discovered (--no-config), nothing prompted, and an
// import map that blocks every file:, node:, npm:, jsr: and remote
// specifier: the harness's, or, with a JavaScript package environment
// bound (p.Deps), the environment's (the same blocked specifiers plus its
// packages' bare names, mapped to npm: specifiers Deno reads from the
// environment's cache; package environments/npm). Only then is npm
// resolution on (without --no-npm): the tool's own npm: imports stay
// blocked by the map, and --cached-only keeps Deno off the registry. The
// packages need no --allow-read: Deno loads modules without it.
//
// Permissions in every network mode: reading the run's /workspace (its
// input files), writing /workspace/out (its artifacts), and reading and
// writing the run's secrets directory (jaillayout.SecretsDir, its own
// tmpfs: the harness writes the run's brokered secrets there and revokes
// the write permission before the tool loads; the tool may read them);
// nothing else in network mode none. In network modes proxy and host,
// --allow-net: Deno checks a fetch against the URL's host, not the proxy
// it goes through (measured on Deno 2.9.8: --allow-net limited to the
// proxy's address refuses fetch("https://example.com") through
// HTTPS_PROXY), so the wall is the jail's network namespace, as for
// Python: in mode proxy it holds nothing but loopback, where the harness
// relays 127.0.0.1:3128 to the run's egress socket. That relay needs read
// and write access to the socket's path (Deno asks both of a unix
// connect), which grants nothing else: the path is a socket on a
// read-only bind.
func denoFlags(p profile) []string {
	read := []string{jaillayout.WorkspaceDir, jaillayout.SecretsDir}
	write := []string{jaillayout.WorkspaceOutDir, jaillayout.SecretsDir}
	net := false
	switch p.Network {
	case NetworkProxy:
		read = append(read, jaillayout.EgressSocket)
		write = append(write, jaillayout.EgressSocket)
		net = true
	case NetworkHost:
		net = true
	}
	flags := []string{"--allow-read=" + strings.Join(read, ","), "--allow-write=" + strings.Join(write, ",")}
	if net {
		flags = append(flags, "--allow-net")
	}
	flags = append(flags, "--no-remote", "--cached-only", "--no-config", "--no-lock", "--no-prompt")
	if p.Deps == "" {
		return append(flags, "--no-npm", "--import-map="+harness.Dir+"/"+harness.ImportMap)
	}
	return append(flags, "--import-map="+jaillayout.DepsImportMap)
}

// denoEnv is added to jailEnv in the Deno runtimes: the read-only cache
// directory (Deno refuses to start without one; a package environment's
// when one is bound), no colours, no update check, and the rootfs's CA
// bundle as the only trust store for TLS (as for Python: "system" makes
// Deno read SSL_CERT_FILE instead of the Mozilla roots compiled into it;
// certificates are always checked).
func denoEnv(p profile) []string {
	dir := jaillayout.DenoDir
	if p.Deps != "" {
		dir = jaillayout.DepsDenoDir
	}
	return []string{
		"DENO_DIR=" + dir,
		"NO_COLOR=1",
		"DENO_NO_UPDATE_CHECK=1",
		// No transpile cache: DENO_DIR is read-only, and Deno retries
		// writing each transpiled TypeScript module to DENO_DIR/gen with
		// growing sleeps (≈ 150 ms of every TypeScript run) before going on.
		"DENO_EMIT_CACHE_MODE=disable",
		"DENO_TLS_CA_STORE=system",
		"SSL_CERT_FILE=" + jaillayout.CABundlePath,
	}
}

// denoCommand is the exec_bin of a Deno runtime: Deno on the harness, with
// V8's heap limited and code generation from strings (eval, new Function)
// disallowed; or, for mode validate, the launcher (execgate_deno.py) that
// runs `deno check` with the same flags (--deps: with the package
// environment's import map).
func denoCommand(p profile) (string, []string) {
	if p.Runtime == runtimeDenoCheck {
		args := []string{"-I", "-S", "-B", "-u", harness.Dir + "/" + harness.DenoEntry}
		if p.Deps != "" {
			args = append(args, "--deps")
		}
		return jaillayout.PythonPath, args
	}
	args := append([]string{"run"}, denoFlags(p)...)
	args = append(args,
		"--v8-flags=--max-old-space-size="+strconv.FormatInt(denoHeapMB(p.Limits.MemoryMB), 10)+","+jaillayout.DenoV8Flags,
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

// checkDenoSpec is what a Deno run cannot ask for.
func checkDenoSpec(spec Spec) []error {
	var errs []error
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

// maxImportMapBytes bounds the import map read from a package environment.
const maxImportMapBytes = 4 << 20

// envPackages are the packages a JavaScript package environment at dir
// (its host directory) lets a tool import: the bare names its import map
// (jaillayout.DepsImportMap, written by package environments/npm) maps to
// npm: specifiers. An error when it has no readable import map.
func envPackages(dir string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, path.Base(jaillayout.DepsImportMap)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxImportMapBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxImportMapBytes {
		return nil, fmt.Errorf("its import map is over %d bytes", maxImportMapBytes)
	}
	var m struct {
		Imports map[string]string `json:"imports"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("its import map does not read: %w", err)
	}
	var out []string
	for k, v := range m.Imports {
		if !strings.HasSuffix(k, "/") && strings.HasPrefix(v, "npm:") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}
