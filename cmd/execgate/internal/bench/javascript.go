package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// JavaScriptProbeSource is the DESIGN §4 probe in JavaScript.
const JavaScriptProbeSource = "export async function run(args, context) {\n  return {ok: true};\n}\n"

// startupJavaScript adds the JavaScript rows beside Python's, in the order
// a cold run's cost builds up: bare Deno on the host (`deno run` of an
// empty module with the jail's flags: the reference the jail's cost is a
// ratio of; execgate itself never runs Deno outside a jail), raw nsjail
// running the same Deno on an empty data: module instead of the harness
// (the jail and Deno's start), then on the harness and the probe (the harness: reading
// the request, importing the tool, the run, the envelope), Runner.Run cold,
// warm and at level process (for both languages, so the warm and process
// rows compare), and `execgate run probe.js`.
func (r *Report) startupJavaScript(ctx context.Context, cold *sandbox.Runner) error {
	n := r.Options.Runs
	js := sandbox.Spec{Language: sandbox.LanguageJavaScript, Source: JavaScriptProbeSource, Limits: limits.Default}
	argv, req, err := cold.RawCommand(js)
	if err != nil {
		return fmt.Errorf("bench: javascript: %w", err)
	}
	bare, err := bareDeno("", argv)
	if err != nil {
		return err
	}
	defer os.RemoveAll(bare.dir)
	r.progress("startup: bare deno (host) ×%d", n)
	s, err := sampleProcess(ctx, "bare deno (host): run of an empty module, the jail's flags", bare.spec, n)
	if err != nil {
		return err
	}
	r.Startup = append(r.Startup, s)
	emptyArgv, err := withConfig(argv, denoEmptyConfig)
	if err != nil {
		return err
	}
	r.progress("startup: raw nsjail deno empty module ×%d", n)
	if s, err = sampleProcess(ctx, "raw nsjail: deno run of an empty module (no harness)", procSpec{argv: emptyArgv, extraFiles: 2}, n); err != nil {
		return err
	}
	r.Startup = append(r.Startup, s)
	r.progress("startup: raw nsjail deno harness+probe ×%d", n)
	if s, err = sampleProcess(ctx, "raw nsjail: javascript probe (deno + harness)", procSpec{argv: argv, stdin: req, extraFiles: 2}, n); err != nil {
		return err
	}
	r.Startup = append(r.Startup, s)
	r.progress("startup: Runner.Run cold javascript ×%d", n)
	if s, err = sampleRunner(ctx, "Runner.Run cold, javascript", cold, js, n); err != nil {
		return err
	}
	r.Startup = append(r.Startup, s)

	warm, err := r.newRunner(ctx, r.Options.Runtimes[0], r.Options.WarmPool)
	if err != nil {
		return err
	}
	defer warm.Close()
	for i, c := range []struct {
		name string
		spec sandbox.Spec
	}{
		{"Runner.Run warm, python", sandbox.Spec{Source: ProbeSource, Limits: limits.Default}},
		{"Runner.Run warm, javascript", js},
	} {
		r.progress("startup: %s ×%d", c.name, n)
		// Each profile run so far keeps its own warm jails.
		if s, err = sampleWarmRunner(ctx, c.name, warm, c.spec, n, (i+1)*r.Options.WarmPool); err != nil {
			return err
		}
		r.Startup = append(r.Startup, s)
	}

	// Level process: the run's Deno was started ahead, as a spare of the
	// zygote (the cold runner has no warm pool; zygotes need none).
	for _, c := range []struct {
		name string
		spec sandbox.Spec
	}{
		{"Runner.Run process, python", sandbox.Spec{Source: ProbeSource, Limits: limits.Default, Isolation: sandbox.IsolationProcess}},
		{"Runner.Run process, javascript", sandbox.Spec{Language: sandbox.LanguageJavaScript, Source: JavaScriptProbeSource, Limits: limits.Default, Isolation: sandbox.IsolationProcess}},
	} {
		r.progress("startup: %s ×%d", c.name, n)
		if s, err = sampleSpareRunner(ctx, c.name, cold, c.spec, n); err != nil {
			return err
		}
		r.Startup = append(r.Startup, s)
	}

	r.progress("startup: execgate run probe.js cold ×%d", n)
	s, err = r.sampleRunCommand(ctx, "execgate run probe.js (cold)", "", "probe.js", JavaScriptProbeSource, n)
	if err != nil {
		return err
	}
	r.Startup = append(r.Startup, s)
	return nil
}

// warmWait bounds the wait for the pool to refill between warm samples.
const warmWait = 30 * time.Second

// warmSettle is how long the pool must have held its jails before a warm
// sample: a jail counts as idle from its start, and its harness reaches
// its blocking read of the request 15-60 ms later on this kind of host (a
// Deno's later than a CPython's). A sample taken sooner is a hand-off to a
// jail still starting, which is not what a warm pool holds after a pause.
const warmSettle = 300 * time.Millisecond

// waitWarmReady waits, at most warmWait, until runner's pool has held at
// least idle jails (every registered profile's) for warmSettle.
func waitWarmReady(ctx context.Context, runner *sandbox.Runner, idle int) error {
	deadline := time.Now().Add(warmWait)
	var fullSince time.Time
	for {
		n := runner.Info().WarmIdle
		switch {
		case n < idle:
			fullSince = time.Time{}
		case fullSince.IsZero():
			fullSince = time.Now()
		case time.Since(fullSince) >= warmSettle:
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the warm pool did not refill in %s (%d of %d jails)", warmWait, n, idle)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sampleWarmRunner times Runner.Run with a warm jail of spec's profile
// waiting: before each sample it waits (not timed) until the pool holds
// idle jails (every registered profile full) that have started
// (waitWarmReady), so every sample is a hand-off to a started jail.
func sampleWarmRunner(ctx context.Context, name string, runner *sandbox.Runner, spec sandbox.Spec, n, idle int) (*Sample, error) {
	// The first run registers the profile with the pool (and is cold).
	if res, err := runner.Run(ctx, spec); err != nil || res.Status != sandbox.StatusOK {
		return nil, fmt.Errorf("bench: %s: first run: %v %v", name, err, res.Error)
	}
	var walls, cpus []time.Duration
	for i := 0; i < n; i++ {
		if err := waitWarmReady(ctx, runner, idle); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		t0 := time.Now()
		res, err := runner.Run(ctx, spec)
		wall := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if res.Status != sandbox.StatusOK {
			return nil, fmt.Errorf("bench: %s: status %s %v", name, res.Status, res.Error)
		}
		walls = append(walls, wall)
		cpus = append(cpus, time.Duration(res.Usage.CPUMS)*time.Millisecond)
	}
	return &Sample{Name: name, Command: "sandbox.(*Runner).Run with sandbox.warm_pool", Runs: n, Wall: statsOf(walls), CPU: statsOf(cpus)}, nil
}

// bareDenoRun is the "bare deno (host)" row's process and its directory.
type bareDenoRun struct {
	spec procSpec
	dir  string // an empty module and DENO_DIR, removed after the row
}

// bareDeno is `deno run` of an empty module on the host with the flags of
// the jail's Deno (read from the jail's profile config, the cfg after
// --config in rawArgv) but no import map (it blocks file: modules other
// than the harness), its cache in a fresh writable directory (as a
// developer's `deno run` has it), in the jail's environment.
func bareDeno(configured string, rawArgv []string) (*bareDenoRun, error) {
	deno, err := sandbox.FindDeno(configured)
	if err != nil {
		return nil, fmt.Errorf("bench: bare deno: %w", err)
	}
	cfg, err := os.ReadFile(configArg(rawArgv))
	if err != nil {
		return nil, fmt.Errorf("bench: bare deno: %w", err)
	}
	args, env := denoExec(string(cfg))
	if len(args) < 2 || args[0] != "run" {
		return nil, fmt.Errorf("bench: bare deno: the profile does not run deno as expected: %q", args)
	}
	dir, err := os.MkdirTemp("", "execgate-bench-deno-")
	if err != nil {
		return nil, err
	}
	module := filepath.Join(dir, "empty.js")
	if err := os.WriteFile(module, nil, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	argv := []string{deno}
	for _, a := range args[:len(args)-1] {
		if !strings.HasPrefix(a, "--import-map=") {
			argv = append(argv, a)
		}
	}
	argv = append(argv, module)
	for i, e := range env {
		if strings.HasPrefix(e, "DENO_DIR=") {
			env[i] = "DENO_DIR=" + filepath.Join(dir, "deno-dir")
		}
	}
	return &bareDenoRun{spec: procSpec{argv: argv, env: env}, dir: dir}, nil
}

// configIndex is the index of --config's value in argv (-1 without one).
func configIndex(argv []string) int {
	for i, a := range argv[:max(len(argv)-1, 0)] {
		if a == "--config" {
			return i + 1
		}
	}
	return -1
}

// configArg is the value of --config in argv ("" without one).
func configArg(argv []string) string {
	if i := configIndex(argv); i >= 0 {
		return argv[i]
	}
	return ""
}

// denoExec reads the exec_bin args and the envar lines of a profile config.
func denoExec(cfg string) (args, env []string) {
	inExec := false
	for _, l := range strings.Split(cfg, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "exec_bin {"):
			inExec = true
		case inExec && l == "}":
			inExec = false
		case inExec && strings.HasPrefix(l, "arg: "):
			if v, err := strconv.Unquote(strings.TrimPrefix(l, "arg: ")); err == nil {
				args = append(args, v)
			}
		case strings.HasPrefix(l, "envar: "):
			if v, err := strconv.Unquote(strings.TrimPrefix(l, "envar: ")); err == nil {
				env = append(env, v)
			}
		}
	}
	return args, env
}

// denoEmptyConfig copies the JavaScript profile config at path with the
// harness replaced by an empty data: module: the jail and Deno's start,
// without the harness.
func denoEmptyConfig(path string) (string, error) {
	return editConfig(path, "bench-deno-empty-*.cfg",
		[2]string{`arg: "/opt/execgate/harness/execgate_harness.js"`, `arg: "data:text/javascript,"`})
}

// withConfig is argv with its --config file replaced by what edit makes of it.
func withConfig(argv []string, edit func(string) (string, error)) ([]string, error) {
	i := configIndex(argv)
	if i < 0 {
		return nil, fmt.Errorf("bench: no --config in %q", argv)
	}
	p, err := edit(argv[i])
	if err != nil {
		return nil, err
	}
	out := append([]string(nil), argv...)
	out[i] = p
	return out, nil
}

// spareWait is how long a level-process sample waits (not timed) before
// it runs, for the zygote to replace the spare the previous run took: a
// JavaScript spare is a started Deno (≈ 30 ms of CPU on a loaded 2-core
// host).
const spareWait = 300 * time.Millisecond

// sampleSpareRunner times Runner.Run at level process with the zygote's
// spares ready: each sample is a hand-off to a process set up (and, for
// JavaScript, a Deno started) ahead of the run. CPU is the run's from the
// hand-off (Usage.CPUMS), as a warm jail's.
func sampleSpareRunner(ctx context.Context, name string, runner *sandbox.Runner, spec sandbox.Spec, n int) (*Sample, error) {
	var walls, cpus []time.Duration
	for i := 0; i <= n; i++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(spareWait):
		}
		t0 := time.Now()
		res, err := runner.Run(ctx, spec)
		wall := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if res.Status != sandbox.StatusOK || res.Usage.Isolation != sandbox.IsolationProcess {
			return nil, fmt.Errorf("bench: %s: status %s at level %q %v", name, res.Status, res.Usage.Isolation, res.Error)
		}
		if i == 0 {
			continue // the zygote's start
		}
		walls = append(walls, wall)
		cpus = append(cpus, time.Duration(res.Usage.CPUMS)*time.Millisecond)
	}
	return &Sample{Name: name, Command: "sandbox.(*Runner).Run with isolation process, spares ready", Runs: n, Wall: statsOf(walls), CPU: statsOf(cpus)}, nil
}
