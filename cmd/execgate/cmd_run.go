package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// Exit codes of `execgate run` and `execgate smoke`.
const (
	exitRunError       = 1 // the tool ran and the envelope says error
	exitSandboxMissing = 3 // SandboxUnavailable: nothing ran
)

type runFlags struct {
	args         string
	entrypoint   string
	network      string
	timeout      time.Duration
	memory       string
	requirements []string
	lock         string
	egress       []string
	language     string
	runtime      string
	json         bool
	// tenant is the config's tenant whose package policy applies to
	// --requirements and --lock (default demo) and, when given, whose tool
	// servers the run may call (code mode).
	tenant string
	tools  []string // code mode: narrows the tenant's granted tools
	// files are the --file arguments, PATH or PATH=NAME: input files at
	// /workspace/NAME (run_files.go).
	files []string
	stdin string // --stdin: a file whose content is the tool's stdin ("-": ours)
	out   string // --out: the directory the artifacts are written into
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run FILE.py|FILE.js|FILE.ts",
		Short: "Run one tool locally through the sandbox and print its envelope",
		Long: `Run FILE once through the same sandbox path the gateway uses (nsjail,
rootfs, seccomp, cgroups) and print the result envelope: pretty by default,
the raw JSON with --json. The rootfs is built first if it is missing or stale.
The language follows the file's extension (.py python, .js/.mjs javascript,
.ts/.mts typescript) unless --language says otherwise; JavaScript and
TypeScript run under Deno in the jail with every Deno permission denied (but
the network with --network proxy or host).

--timeout sets both the wall-clock and the CPU limit. --requirements (PEP 508,
e.g. "requests>=2.31") are resolved with uv to a locked set, wheels only, and
--lock FILE takes such a lock as is (for a JavaScript or TypeScript tool:
npm packages with exact versions, "left-pad@1.3.0", resolved with their
dependencies and sha512 integrity, importable by bare name); every package of the set goes through
the package policy of --tenant (from the config, as execgate serve applies
it: a denial exits 2 and names the chain that pulled a package in), then the
environment is installed into the deps cache under the state directory. --network proxy lets the tool out only through execgate's
egress proxy, to the hosts named by --egress (egress.allow_cidrs from the
config opens private ranges). --tenant gives the tool the tool servers the
config names for that tenant (code mode: context.tools.search, describe,
run), granted and checked per call by the tenant's policy.

--file PATH (repeatable) puts a file of the host read-only at
/workspace/BASENAME in the jail (the tool's working directory), --file
PATH=NAME at /workspace/NAME; together at most limits.files (32) files and
limits.files_bytes (8 MiB). --stdin FILE is the tool's standard input ("-":
this command's). What the tool leaves in /workspace/out (or saves with
context.artifacts.save) is listed with the envelope, and --out DIR writes
each file into DIR (made if missing): a regular file of the same name is
replaced, a symbolic link or anything else there is left alone (an error).

Exit status: 0 when the envelope's status is ok, 1 when it is error (or an
artifact could not be written), 3 when the sandbox is unavailable (nothing
ran).`,
		Example: `  execgate run tool.py --args '{"name": "Ada"}'
  execgate run tool.ts --args '{"name": "Ada"}'
  execgate run tool.py --timeout 30s --memory 512M --json
  execgate run tool.py --requirements 'six==1.16.0,attrs>=23' --tenant demo
  execgate run tool.py --lock requirements.lock
  execgate run tool.js --requirements left-pad@1.3.0
  execgate run tool.py --network proxy --egress api.example.com:443,*.example.org
  execgate run program.py --config execgate.yaml --tenant acme --tools 'search.*'
  execgate run chart.py --file data.csv --file ~/in/logo.png=img/logo.png --out ./charts`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := f.spec(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			var out *os.Root
			if f.out != "" {
				if out, err = openOut(f.out); err != nil {
					return err
				}
				defer out.Close()
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if f.tenant != "" {
				spec.TenantID = f.tenant
				bridge, closeTools, err := localTools(cmd.Context(), cfg, f.tenant, f.tools, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				defer closeTools()
				spec.Bridge = bridge
			} else if len(f.tools) > 0 {
				return fmt.Errorf("--tools: needs --tenant (whose tool servers the config names)")
			}
			res, err := runLocal(cmd.Context(), cfg, spec, f, cmd.ErrOrStderr())
			var denied *packagesDenied
			if errors.As(err, &denied) {
				fmt.Fprintln(cmd.ErrOrStderr(), denied.Error())
				return exitError{code: denied.ExitCode()}
			}
			var written []string
			var writeErr error
			if out != nil && err == nil {
				written, writeErr = writeArtifacts(out, res.Artifacts)
			}
			rerr := reportRun(cmd.OutOrStdout(), spec, res, err, f.json, written)
			if writeErr == nil {
				return rerr
			}
			return fmt.Errorf("--out %s: %w", f.out, writeErr) // exit 1, as a run in error
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.args, "args", "null", "the tool's args, as JSON")
	fl.StringVar(&f.entrypoint, "entrypoint", "run", "the function to call: run(args, context)")
	fl.StringVar(&f.network, "network", "none", "network mode: none, proxy (only the --egress hosts, through the egress proxy) or host")
	fl.DurationVar(&f.timeout, "timeout", time.Duration(limits.Default.TimeoutMS)*time.Millisecond, "wall-clock and CPU time limit")
	fl.StringVar(&f.memory, "memory", fmt.Sprintf("%dM", limits.Default.MemoryMB), "memory limit (e.g. 256M, 1G)")
	fl.StringSliceVar(&f.requirements, "requirements", nil, "requirements to resolve and install first (PEP 508, wheels only), e.g. 'a==1,b>=2'; for a JavaScript or TypeScript tool npm packages with exact versions, e.g. 'left-pad@1.3.0'")
	fl.StringVar(&f.lock, "lock", "", "a lock to install first (pip's hashes format, e.g. from execgate prepare or uv pip compile --generate-hashes)")
	fl.StringSliceVar(&f.egress, "egress", nil, "with --network proxy: the hosts the tool may reach, host[:port] or *.domain[:port] (no port: 443 and 80)")
	fl.StringVar(&f.language, "language", "", "python, javascript or typescript (default: from the file's extension)")
	fl.StringVar(&f.runtime, "runtime", "", "the Python runtime: "+strings.Join(limits.Runtimes, ", ")+" (default: the first of sandbox.runtimes, python3.11); its rootfs is built first if needed")
	fl.BoolVar(&f.json, "json", false, "print the raw JSON envelope")
	fl.StringVar(&f.tenant, "tenant", "", "a tenant of --config: its package policy applies to --requirements and --lock (default demo), and code mode calls its tool servers, governed by its policy")
	fl.StringSliceVar(&f.tools, "tools", nil, "code mode: narrow the granted tools (names or globs, e.g. search.*)")
	fl.StringArrayVar(&f.files, "file", nil, "an input file, PATH or PATH=NAME: read-only at /workspace/NAME (default its base name); repeatable")
	fl.StringVar(&f.stdin, "stdin", "", "a file whose content is the tool's standard input (- for this command's)")
	fl.StringVar(&f.out, "out", "", "write the run's artifacts (the files of /workspace/out) into this directory")
	return cmd
}

// packageTenant is the tenant whose package policy --requirements and
// --lock go through: --tenant, else the embedded default's demo.
func (f runFlags) packageTenant() string {
	if f.tenant == "" {
		return config.DemoTenant().ID
	}
	return f.tenant
}

// spec turns the flags into a sandbox.Spec, naming the flag at fault.
func (f runFlags) spec(file string, stdin io.Reader) (sandbox.Spec, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return sandbox.Spec{}, fmt.Errorf("reading the tool: %w", err)
	}
	if !json.Valid([]byte(f.args)) {
		return sandbox.Spec{}, fmt.Errorf("--args: %q is not valid JSON", f.args)
	}
	switch sandbox.Network(f.network) {
	case sandbox.NetworkNone, sandbox.NetworkHost, sandbox.NetworkProxy:
	default:
		return sandbox.Spec{}, fmt.Errorf("--network: %q is not none, proxy or host", f.network)
	}
	if f.timeout <= 0 {
		return sandbox.Spec{}, fmt.Errorf("--timeout: %v must be positive", f.timeout)
	}
	mem, err := parseMiB(f.memory)
	if err != nil {
		return sandbox.Spec{}, fmt.Errorf("--memory: %w", err)
	}
	if len(f.egress) > 0 && sandbox.Network(f.network) != sandbox.NetworkProxy {
		return sandbox.Spec{}, fmt.Errorf("--egress: only meaningful with --network proxy (network is %s)", f.network)
	}
	if _, err := egress.ParseRules(f.egress); err != nil {
		return sandbox.Spec{}, fmt.Errorf("--egress: %w", err)
	}
	lang, err := toolLanguage(file, f.language)
	if err != nil {
		return sandbox.Spec{}, err
	}
	if f.runtime != "" {
		if !limits.KnownRuntime(f.runtime) {
			return sandbox.Spec{}, fmt.Errorf("--runtime: %q is not one of %s", f.runtime, strings.Join(limits.Runtimes, ", "))
		}
		if lang != sandbox.LanguagePython {
			return sandbox.Spec{}, fmt.Errorf("--runtime: only python runs name a runtime; %s runs choose by language", lang)
		}
	}
	lim := sandbox.Limits{
		TimeoutMS: f.timeout.Milliseconds(),
		CPUMS:     f.timeout.Milliseconds(),
		MemoryMB:  mem,
	}.Or(limits.Default)
	files, err := inputFiles(f.files, lim)
	if err != nil {
		return sandbox.Spec{}, err
	}
	in, err := f.readStdin(stdin)
	if err != nil {
		return sandbox.Spec{}, err
	}
	return sandbox.Spec{
		Runtime:     f.runtime,
		ExecutionID: newExecutionID(),
		TenantID:    "local",
		Language:    lang,
		Source:      string(src),
		Entrypoint:  f.entrypoint,
		Args:        json.RawMessage(f.args),
		Network:     sandbox.Network(f.network),
		EgressAllow: f.egress,
		Limits:      lim,
		Files:       files,
		Stdin:       in,
	}, nil
}

// maxStdinBytes bounds --stdin as the gateway's default bounds a request's
// stdin (server.max_args_bytes).
const maxStdinBytes = gateway.DefaultMaxArgsBytes

// readStdin reads --stdin: a file, or stdin for "-", of at most
// maxStdinBytes.
func (f runFlags) readStdin(stdin io.Reader) (string, error) {
	var r io.Reader
	switch f.stdin {
	case "":
		return "", nil
	case "-":
		r = stdin
	default:
		fh, err := os.Open(f.stdin)
		if err != nil {
			return "", fmt.Errorf("--stdin: %w", err)
		}
		defer fh.Close()
		r = fh
	}
	data, err := io.ReadAll(io.LimitReader(r, maxStdinBytes+1))
	if err != nil {
		return "", fmt.Errorf("--stdin: %w", err)
	}
	if len(data) > maxStdinBytes {
		return "", fmt.Errorf("--stdin: more than %d bytes", maxStdinBytes)
	}
	return string(data), nil
}

// toolLanguage is the language of the tool file: flag, or extension.
func toolLanguage(file, flag string) (string, error) {
	if flag != "" {
		for _, l := range sandbox.Languages {
			if flag == l {
				return l, nil
			}
		}
		return "", fmt.Errorf("--language: %q is not one of %s", flag, strings.Join(sandbox.Languages, ", "))
	}
	switch strings.ToLower(filepath.Ext(file)) {
	case ".js", ".mjs":
		return sandbox.LanguageJavaScript, nil
	case ".ts", ".mts":
		return sandbox.LanguageTypeScript, nil
	}
	return sandbox.LanguagePython, nil
}

// parseMiB parses a memory size (bytes without a suffix; K, M, G with an
// optional i/B) into MiB, rounding up.
func parseMiB(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, strings.TrimSuffix(t, "K")
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, strings.TrimSuffix(t, "M")
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, strings.TrimSuffix(t, "G")
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("%q is not a size like 256M or 1G", s)
	}
	return (n*mult + (1<<20 - 1)) >> 20, nil
}

func newExecutionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "local-" + hex.EncodeToString(b[:])
}

// runLocal runs spec once, cold: nsjail first (so a host without it learns
// that before any rootfs build), then the sandbox as the gateway assembles
// it (app.NewSandbox: the rootfs built when missing or stale, with progress
// on progress), then the package environment, then the run.
func runLocal(ctx context.Context, cfg *config.Config, spec sandbox.Spec, f runFlags, progress io.Writer) (sandbox.Result, error) {
	scfg := cfg.Sandbox
	scfg.WarmPool = 0 // one run: nothing to keep warm
	if _, err := sandbox.FindNsjail(scfg); err != nil {
		return sandbox.Result{}, err
	}
	// Only the runtime the run needs is opened (and built, if needed):
	// --runtime, or the first of sandbox.runtimes (which also runs
	// JavaScript and TypeScript).
	if spec.Runtime == "" {
		spec.Runtime = scfg.WithDefaultRuntimes()[0]
	}
	o := app.SandboxOptions{Sandbox: scfg, Runtimes: []string{spec.Runtime}, EnsureRootfs: true, Progress: progress}
	if spec.Language != sandbox.LanguagePython {
		spec.Runtime = ""
	}
	if spec.Network == sandbox.NetworkProxy {
		o.Egress = &cfg.Egress
	}
	sb, err := app.NewSandbox(ctx, o)
	if sb != nil {
		defer sb.Close()
	}
	if err != nil {
		return sandbox.Result{}, err
	}
	var envs *environments.Cache
	if len(f.requirements) > 0 || f.lock != "" {
		if envs, err = sb.Runtimes.Environments(spec.Language, spec.Runtime); err != nil {
			return sandbox.Result{}, err
		}
	}
	env, failure, err := localEnvironment(ctx, cfg, envs, spec.Runtime, f.packageTenant(), spec.Language, f.requirements, f.lock, progress)
	if err != nil {
		return sandbox.Result{}, err
	}
	if failure != nil {
		return sandbox.Result{Status: sandbox.StatusError, Result: json.RawMessage("null"), Error: failure}, nil
	}
	if env != nil {
		spec.Lock = env.Lock // installed on the way in (Installing), bound by the runner
	}
	return sb.Runtimes.Run(ctx, spec) // the runtime's cache installs spec.Lock first
}

// reportRun prints the outcome of a run and turns it into the exit status.
// Errors that are not about the sandbox (bad config, rootfs build) are
// returned as they are.
//
// written are the artifacts --out wrote (nil without --out).
func reportRun(w io.Writer, spec sandbox.Spec, res sandbox.Result, runErr error, asJSON bool, written []string) error {
	var u *sandbox.UnavailableError
	if runErr != nil && !errors.As(runErr, &u) {
		return runErr
	}
	if u != nil {
		res = sandbox.Result{Status: sandbox.StatusError,
			Error: &sandbox.ErrorInfo{Type: gateway.TypeSandboxUnavailable, Message: u.Error(), Traceback: u.Detail()}}
	}
	// The gateway's envelope (DESIGN §4); decision and trace_id stay null
	// and empty: nothing decided, nothing traced.
	env := execution.RunEnvelope(spec.ExecutionID, spec.TenantID, res)
	env.Artifacts = execution.EnvelopeArtifacts(res.Artifacts, -1, 0) // the bytes go to --out
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(env); err != nil {
			return err
		}
	} else {
		printEnvelope(w, env, res.ToolCalls)
		printArtifacts(w, env, written)
	}
	switch {
	case u != nil:
		return exitError{code: exitSandboxMissing}
	case env.Status != sandbox.StatusOK:
		return exitError{code: exitRunError}
	}
	return nil
}

// printEnvelope renders an envelope for a terminal; calls are the run's
// tool calls in full (the envelope has no reasons).
func printEnvelope(w io.Writer, env *execution.Envelope, calls []sandbox.ToolCall) {
	fmt.Fprintf(w, "status:    %s\n", env.Status)
	if env.Status == sandbox.StatusOK {
		result := env.Result
		if len(result) == 0 {
			result = json.RawMessage("null")
		}
		var pretty bytes.Buffer
		if json.Indent(&pretty, result, "           ", "  ") == nil {
			fmt.Fprintf(w, "result:    %s\n", pretty.String())
		} else {
			fmt.Fprintf(w, "result:    %s\n", result)
		}
	}
	if e := env.Error; e != nil {
		fmt.Fprintf(w, "error:     %s: %s\n", e.Type, e.Message)
		if e.Line > 0 {
			fmt.Fprintf(w, "line:      %d\n", e.Line)
		}
		if e.Traceback != "" {
			fmt.Fprintf(w, "traceback:\n%s", indentBlock(e.Traceback))
		}
	}
	printStream(w, "stdout", env.Stdout, env.Truncated.Stdout)
	printStream(w, "stderr", env.Stderr, env.Truncated.Stderr)
	if len(env.Logs) > 0 {
		fmt.Fprintf(w, "logs:\n")
		for _, l := range env.Logs {
			fmt.Fprintf(w, "  [%s] %s\n", l.Level, l.Message)
		}
	}
	if len(env.Egress) > 0 {
		fmt.Fprintf(w, "egress:\n")
		for _, a := range env.Egress {
			verdict := "allowed"
			if !a.Allowed {
				verdict = "denied: " + a.Reason
			}
			fmt.Fprintf(w, "  %s:%d %s\n", a.Host, a.Port, verdict)
		}
	}
	if len(calls) > 0 {
		fmt.Fprintf(w, "tool calls:\n")
		for _, c := range calls {
			fmt.Fprintf(w, "  %s %s (%d ms)", c.Tool, c.Outcome, c.MS)
			if c.Reason != "" {
				fmt.Fprintf(w, ": %s", c.Reason)
			}
			fmt.Fprintln(w)
		}
	}
	if env.Error != nil && env.Error.Type == gateway.TypeSandboxUnavailable {
		return // nothing ran: no usage to show
	}
	u := env.Usage
	fmt.Fprintf(w, "usage:     wall %d ms, cpu %d ms, peak memory %.1f MiB\n", u.WallMS, u.CPUMS, float64(u.PeakMemoryKB)/1024)
	fmt.Fprintf(w, "execution: %s\n", env.ExecutionID)
}

func printStream(w io.Writer, name, text string, truncated bool) {
	if text == "" {
		return
	}
	note := ""
	if truncated {
		note = " (truncated at the output cap)"
	}
	fmt.Fprintf(w, "%s:%s\n%s", name, note, indentBlock(text))
}

func indentBlock(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

// printArtifacts lists env's artifacts and what was not collected, for a
// terminal; written are the names --out wrote (nil: no --out).
func printArtifacts(w io.Writer, env *execution.Envelope, written []string) {
	if len(env.Artifacts) == 0 && env.Truncated.ArtifactsDropped == 0 {
		return
	}
	fmt.Fprintf(w, "artifacts:\n")
	saved := make(map[string]bool, len(written))
	for _, n := range written {
		saved[n] = true
	}
	for _, a := range env.Artifacts {
		note := ""
		switch {
		case saved[a.Name]:
			note = ": written"
		case written == nil:
			note = " (--out DIR writes it)"
		default:
			note = ": not written"
		}
		fmt.Fprintf(w, "  %s (%d bytes, %s)%s\n", a.Name, a.Bytes, a.MIME, note)
	}
	for _, d := range env.Truncated.Artifacts {
		fmt.Fprintf(w, "  not collected: %q: %s\n", d.Name, d.Reason)
	}
	if n := env.Truncated.ArtifactsDropped - len(env.Truncated.Artifacts); n > 0 {
		fmt.Fprintf(w, "  not collected: %d more\n", n)
	}
}
