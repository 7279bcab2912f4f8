package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// JavaScriptProbeSource is the DESIGN §4 probe in JavaScript.
const JavaScriptProbeSource = "export async function run(args, context) {\n  return {ok: true};\n}\n"

// startupJavaScript adds the JavaScript rows beside Python's: raw nsjail
// running Deno on the harness and the probe, Runner.Run cold, warm and at
// level process (for both languages, so the warm and process rows
// compare), and `execgate run probe.js`.
// Deno never runs outside a jail, so there is no "bare deno" row.
func (r *Report) startupJavaScript(ctx context.Context, cold *sandbox.Runner) error {
	n := r.Options.Runs
	js := sandbox.Spec{Language: sandbox.LanguageJavaScript, Source: JavaScriptProbeSource, Limits: limits.Default}
	argv, req, err := cold.RawCommand(js)
	if err != nil {
		return fmt.Errorf("bench: javascript: %w", err)
	}
	r.progress("startup: raw nsjail deno harness+probe ×%d", n)
	s, err := sampleProcess(ctx, "raw nsjail: javascript probe (deno + harness)", procSpec{argv: argv, stdin: req, extraFiles: 2}, n)
	if err != nil {
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

// sampleWarmRunner times Runner.Run with a warm jail of spec's profile
// waiting: before each sample it waits (not timed) until the pool holds
// idle jails (every registered profile full), so every sample is a
// hand-off to a started jail.
func sampleWarmRunner(ctx context.Context, name string, runner *sandbox.Runner, spec sandbox.Spec, n, idle int) (*Sample, error) {
	// The first run registers the profile with the pool (and is cold).
	if res, err := runner.Run(ctx, spec); err != nil || res.Status != sandbox.StatusOK {
		return nil, fmt.Errorf("bench: %s: first run: %v %v", name, err, res.Error)
	}
	var walls, cpus []time.Duration
	for i := 0; i < n; i++ {
		deadline := time.Now().Add(warmWait)
		for runner.Info().WarmIdle < idle {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("bench: %s: the warm pool did not refill in %s", name, warmWait)
			}
			time.Sleep(5 * time.Millisecond)
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
