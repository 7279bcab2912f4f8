package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge/bridgebench"
)

// ProbeSource is the DESIGN §4 probe tool every measurement runs.
const ProbeSource = "async def run(args, context):\n    return {\"ok\": True}\n"

// Sections of a benchmark run.
const (
	SectionStartup  = "startup"  // bare python, raw nsjail, Runner, execgate run
	SectionGateway  = "gateway"  // HTTP end to end, cold and warm, per concurrency
	SectionOverhead = "overhead" // gateway with a no-op executor
	SectionMemory   = "memory"   // gateway RSS idle and under load, per warm jail
	SectionOutput   = "output"   // gateway RSS around concurrent control-byte and artifact floods, and stalled readers
	SectionBridge   = "bridge"   // one code-mode tool call: direct, governed, from a jail
	SectionFiles    = "files"    // one input file and one small artifact on a trivial run, per level
)

// AllModes are the gateway section's modes, in report order: no warm pool,
// a warm pool, and isolation level process.
var AllModes = []string{"cold", "warm", "process"}

// AllLanguages are the languages the start-up and gateway rows run: Python
// on every runtime measured, JavaScript (Deno) on the default one.
var AllLanguages = []string{sandbox.LanguagePython, sandbox.LanguageJavaScript}

// AllSections in report order.
var AllSections = []string{SectionStartup, SectionGateway, SectionOverhead, SectionMemory, SectionOutput, SectionBridge, SectionFiles}

// Options configure Run. Config is required.
type Options struct {
	Config      *config.Config // loaded config: state dir, sandbox, auth
	ConfigFile  string         // passed on to the `execgate run` child ("" = embedded default)
	Binary      string         // the execgate binary for the `execgate run` row; default os.Executable()
	Runs        int            // samples per process row, default 20
	Requests    int            // measured requests per gateway row, default 200
	Concurrency []int          // default 1, 2, 8, 32
	WarmPool    int            // warm jails per profile for the warm rows, default 4
	BridgeCalls int            // measured tool calls per bridge row, default 500
	Sections    []string       // default AllSections
	Modes       []string       // gateway rows' modes, a subset of AllModes; default all
	Languages   []string       // start-up and gateway rows' languages, a subset of AllLanguages; default all
	// Runtimes are the Python runtimes measured, each in turn in the same
	// run (startup and gateway rows per runtime); default the config's
	// sandbox.runtimes.
	Runtimes []string
	// Snekbox is the snekbox driver's command (scripts/snekbox-driver.py
	// in the venv scripts/bench-snekbox.sh prepares), for section snekbox.
	Snekbox  []string
	Progress io.Writer // progress lines; nil: discarded
}

// Report is everything one run measured.
type Report struct {
	Started  time.Time
	Host     string
	Options  Options
	Startup  []*Sample
	Gateway  []GatewayRow
	Overhead []*LoadResult
	Memory   *MemoryReport
	Output   *OutputReport
	// ArtifactFlood is the output section's artifact-flood row.
	ArtifactFlood *ArtifactFloodReport
	// Files are the files section's rows, one per isolation level.
	Files   []FilesRow
	Readers *ReadersReport
	Bridge  *bridgebench.Result
	// Peer is the snekbox section.
	Peer  *PeerReport
	Notes []string
}

// GatewayRow is one load level against the real gateway.
type GatewayRow struct {
	Mode string // "cold" (no warm pool), "warm", or "process" (isolation process)
	// Language is the probe's language: python, or javascript (the
	// default runtime's Deno).
	Language string
	// Runtime is the Python runtime the rows' runs named ("" for
	// JavaScript: it runs in the default runtime's tree).
	Runtime string
	// Isolation is the runs' isolation level, "jail" or "process".
	Isolation string
	// CPUPerRun is the CPU time of the gateway process and of every jail
	// and zygote below its cgroup parent, divided by the measured requests.
	CPUPerRun time.Duration
	*LoadResult
}

// MemoryReport is resident memory in KiB.
type MemoryReport struct {
	GatewayIdleKB int64 // gateway process RSS after start-up, before load
	GatewayPeakKB int64 // highest RSS sampled during the cold load at the largest concurrency
	PerWarmJailKB int64 // RSS of an idle warm jail (nsjail + harness python), averaged
	WarmJails     int
}

// Run measures what opts.Sections ask for.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Config == nil {
		return nil, errors.New("bench: a config is required")
	}
	opts, err := opts.normalized()
	if err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now().UTC(), Host: hostLine(), Options: opts}
	for _, rt := range opts.Runtimes {
		sc := opts.Config.Sandbox
		ro := rootfs.Options{Dir: sc.RootfsOf(rt), Runtime: rt, PythonPath: sc.PythonPath, DebianMirror: sc.DebianMirror, Progress: opts.Progress}
		if _, err := rootfs.Ensure(ctx, ro); err != nil {
			return nil, fmt.Errorf("bench: preparing the rootfs of runtime %s: %w", rt, err)
		}
	}
	has := func(s string) bool { return slices.Contains(opts.Sections, s) }
	if has(SectionStartup) {
		if err := rep.startup(ctx); err != nil {
			return nil, err
		}
	}
	if has(SectionGateway) || has(SectionMemory) {
		if err := rep.gateway(ctx, has(SectionGateway), has(SectionMemory)); err != nil {
			return nil, err
		}
	}
	if has(SectionOverhead) {
		if err := rep.overhead(ctx); err != nil {
			return nil, err
		}
	}
	if has(SectionOutput) {
		if err := rep.outputFlood(ctx); err != nil {
			return nil, err
		}
		if err := rep.artifactFlood(ctx); err != nil {
			return nil, err
		}
		if err := rep.readers(ctx); err != nil {
			return nil, err
		}
	}
	if has(SectionBridge) {
		if err := rep.bridge(ctx); err != nil {
			return nil, err
		}
	}
	if has(SectionFiles) {
		if err := rep.filesCost(ctx); err != nil {
			return nil, err
		}
	}
	if has(SectionSnekbox) {
		if err := rep.snekbox(ctx); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// normalized is opts with its defaults applied and its names checked.
func (opts Options) normalized() (Options, error) {
	var err error
	if opts.Runs <= 0 {
		opts.Runs = 20
	}
	if opts.Requests <= 0 {
		opts.Requests = 200
	}
	if len(opts.Concurrency) == 0 {
		opts.Concurrency = []int{1, 2, 8, 32}
	}
	if opts.WarmPool <= 0 {
		opts.WarmPool = 4
	}
	if opts.BridgeCalls <= 0 {
		opts.BridgeCalls = 500
	}
	// Section snekbox needs its driver: it runs when named, never by default.
	if len(opts.Sections) == 0 {
		opts.Sections = AllSections
	}
	if opts.Sections, err = subset("section", opts.Sections, append(slices.Clone(AllSections), SectionSnekbox)); err != nil {
		return Options{}, err
	}
	if slices.Contains(opts.Sections, SectionSnekbox) && len(opts.Snekbox) == 0 {
		return Options{}, errors.New("bench: section snekbox needs the snekbox driver's command (--snekbox; scripts/bench-snekbox.sh sets it up)")
	}
	if opts.Modes, err = subset("mode", opts.Modes, AllModes); err != nil {
		return Options{}, err
	}
	if opts.Languages, err = subset("language", opts.Languages, AllLanguages); err != nil {
		return Options{}, err
	}
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return Options{}, err
		}
		opts.Binary = exe
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if len(opts.Runtimes) == 0 {
		opts.Runtimes = opts.Config.Sandbox.WithDefaultRuntimes()
	}
	return opts, nil
}

// newRunner is a runner of runtime rt of the configured sandbox with warm
// jails per profile, assembled as the gateway assembles it
// (app.NewSandbox; the rootfs is ensured once by Run).
func (r *Report) newRunner(ctx context.Context, rt string, warm int) (*sandbox.Runner, error) {
	sc := r.Options.Config.Sandbox
	sc.WarmPool = warm
	sb, err := app.NewSandbox(ctx, app.SandboxOptions{Sandbox: sc, Runtimes: []string{rt}})
	if err != nil {
		if sb != nil {
			_ = sb.Close()
		}
		return nil, fmt.Errorf("bench: %w", err)
	}
	return sb.Runtimes.Default().Runner, nil
}

func (r *Report) progress(format string, args ...any) {
	fmt.Fprintf(r.Options.Progress, "bench: "+format+"\n", args...)
}

func (r *Report) startup(ctx context.Context) error {
	cfg := r.Options.Config
	n := r.Options.Runs
	python := cfg.Sandbox.PythonPath
	r.progress("startup: bare %s -c pass ×%d", python, n)
	s, err := sampleProcess(ctx, "bare python (host)", procSpec{argv: []string{python, "-c", "pass"}}, n)
	if err != nil {
		return err
	}
	r.Startup = append(r.Startup, s)
	for i, rt := range r.Options.Runtimes {
		if err := r.startupRuntime(ctx, rt, i == 0 && slices.Contains(r.Options.Languages, sandbox.LanguageJavaScript)); err != nil {
			return err
		}
	}
	return nil
}

// startupRuntime adds runtime rt's rows: raw nsjail running its
// interpreter bare and on the harness, Runner.Run cold, and `execgate run
// --runtime` cold; with js, the JavaScript rows (Deno, in the first
// runtime's tree).
func (r *Report) startupRuntime(ctx context.Context, rt string, js bool) error {
	n := r.Options.Runs
	add := func(s *Sample) { s.Runtime = rt; r.Startup = append(r.Startup, s) }
	runner, err := r.newRunner(ctx, rt, 0)
	if err != nil {
		return err
	}
	defer runner.Close()
	probe := sandbox.Spec{Source: ProbeSource, Limits: limits.Default}
	argv, req, err := runner.RawCommand(probe)
	if err != nil {
		return err
	}
	passCfg, err := pythonPassConfig(argv[2])
	if err != nil {
		return err
	}
	defer os.Remove(passCfg)
	passArgv := slices.Clone(argv)
	passArgv[2] = passCfg
	r.progress("startup %s: raw nsjail python -c pass ×%d", rt, n)
	s, err := sampleProcess(ctx, "raw nsjail: python -c pass", procSpec{argv: passArgv, extraFiles: 2}, n)
	if err != nil {
		return err
	}
	add(s)
	r.progress("startup %s: raw nsjail harness+probe ×%d", rt, n)
	if s, err = sampleProcess(ctx, "raw nsjail: harness + probe", procSpec{argv: argv, stdin: req, extraFiles: 2}, n); err != nil {
		return err
	}
	add(s)
	r.progress("startup %s: Runner.Run cold (in-process) ×%d", rt, n)
	if s, err = sampleRunner(ctx, "Runner.Run cold (in-process)", runner, probe, n); err != nil {
		return err
	}
	add(s)
	if js {
		if err := r.startupJavaScript(ctx, runner); err != nil {
			return err
		}
	}
	r.progress("startup %s: execgate run cold ×%d", rt, n)
	if s, err = r.sampleRunCommand(ctx, "execgate run (cold)", rt, "probe.py", ProbeSource, n); err != nil {
		return err
	}
	add(s)
	return nil
}

// sampleRunCommand times the whole `execgate run FILE --json` process (cold:
// a new jail each time) for source written to a file named file, on
// runtime rt ("": the default; a JavaScript file names none).
func (r *Report) sampleRunCommand(ctx context.Context, name, rt, file, source string, n int) (*Sample, error) {
	dir, err := os.MkdirTemp("", "execgate-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(source), 0o644); err != nil {
		return nil, err
	}
	argv := []string{r.Options.Binary, "run", path, "--json", "--state-dir", r.Options.Config.StateDir}
	if rt != "" {
		argv = append(argv, "--runtime", rt)
	}
	if r.Options.ConfigFile != "" {
		argv = append(argv, "--config", r.Options.ConfigFile)
	}
	return sampleProcess(ctx, name, procSpec{argv: argv, wantOK: wantOKEnvelope}, n)
}

// pythonPassConfig copies the profile config at path with the harness
// replaced by `-c pass`, so raw nsjail runs the bare interpreter in the jail.
func pythonPassConfig(path string) (string, error) {
	return editConfig(path, "bench-pass-*.cfg", [2]string{`arg: "/opt/execgate/harness/harness.py"`, "arg: \"-c\"\n  arg: \"pass\""})
}

// editConfig copies the profile config at path beside it (a file named
// after pattern) with each {old, new} replaced once; an old it lacks is an
// error (the profile does not look as the bench expects).
func editConfig(path, pattern string, edits ...[2]string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, e := range edits {
		if !bytes.Contains(b, []byte(e[0])) {
			return "", fmt.Errorf("bench: %s does not run the harness as expected (no %s)", path, e[0])
		}
		b = bytes.Replace(b, []byte(e[0]), []byte(e[1]), 1)
	}
	f, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return "", err
	}
	return f.Name(), f.Close()
}

func wantOKEnvelope(out []byte) error {
	var env struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(out, &env); err != nil {
		return fmt.Errorf("execgate run printed no JSON envelope: %w: %s", err, out)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, env.Result)
	if env.Status != "ok" || compact.String() != `{"ok":true}` {
		return fmt.Errorf("execgate run: status %q result %s", env.Status, env.Result)
	}
	return nil
}

// sampleRunner times Runner.Run in this process; CPU is the jail's, as the
// runner measures it.
func sampleRunner(ctx context.Context, name string, runner *sandbox.Runner, spec sandbox.Spec, n int) (*Sample, error) {
	var walls, cpus []time.Duration
	for i := 0; i <= n; i++ {
		t0 := time.Now()
		res, err := runner.Run(ctx, spec)
		wall := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if res.Status != sandbox.StatusOK {
			return nil, fmt.Errorf("bench: %s: status %s %v", name, res.Status, res.Error)
		}
		if i == 0 {
			continue // warm-up
		}
		walls = append(walls, wall)
		cpus = append(cpus, time.Duration(res.Usage.CPUMS)*time.Millisecond)
	}
	return &Sample{Name: name, Command: "sandbox.(*Runner).Run", Runs: n, Wall: statsOf(walls), CPU: statsOf(cpus)}, nil
}

// probeBody is the DESIGN §4 probe on runtime rt at isolation level
// isolation ("": the tenant's default; the default level).
func probeBody(rt, isolation string) string {
	return gatewayProbe{language: sandbox.LanguagePython, runtime: rt}.body(isolation)
}

// gatewayProbe is what a gateway row runs: the probe in a language, on a
// Python runtime ("": the default).
type gatewayProbe struct{ language, runtime string }

// body is the probe's request at isolation level isolation ("": the
// default level).
func (p gatewayProbe) body(isolation string) string {
	body := map[string]any{"source": ProbeSource, "entrypoint": "run"}
	if p.language == sandbox.LanguageJavaScript {
		body["source"], body["language"] = JavaScriptProbeSource, p.language
	}
	if p.runtime != "" {
		body["runtime"] = p.runtime
	}
	if isolation != "" {
		body["isolation"] = isolation
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// gatewayProbes are the gateway rows' probes: Python on each runtime,
// then JavaScript, as Options.Languages asks.
func (r *Report) gatewayProbes() []gatewayProbe {
	var ps []gatewayProbe
	if slices.Contains(r.Options.Languages, sandbox.LanguagePython) {
		for _, rt := range r.Options.Runtimes {
			ps = append(ps, gatewayProbe{language: sandbox.LanguagePython, runtime: rt})
		}
	}
	if slices.Contains(r.Options.Languages, sandbox.LanguageJavaScript) {
		ps = append(ps, gatewayProbe{language: sandbox.LanguageJavaScript})
	}
	return ps
}

func (r *Report) gateway(ctx context.Context, loadRows, memory bool) error {
	modes := []struct {
		name      string
		warm      int
		isolation string
	}{{"cold", 0, sandbox.IsolationJail}, {"warm", r.Options.WarmPool, sandbox.IsolationJail}, {"process", 0, sandbox.IsolationProcess}}
	if !loadRows {
		modes = modes[:1]
	}
	mem := &MemoryReport{}
	for _, m := range modes {
		if loadRows && !slices.Contains(r.Options.Modes, m.name) {
			continue
		}
		// One gateway serves every runtime measured; at each level the
		// runtimes take turns, so their rows are measured under the same
		// load (their ratios survive a busy host better than the rows).
		tg, err := startTarget(ctx, r.Options.Config, m.warm, r.Options.Runtimes, app.Options{Progress: r.Options.Progress})
		if err != nil {
			return err
		}
		if err := tg.app.SandboxErr(); err != nil {
			_ = tg.stop(ctx)
			return fmt.Errorf("bench: the sandbox is unavailable: %w", err)
		}
		if m.name == "cold" {
			runtime.GC()
			mem.GatewayIdleKB = selfRSSKB()
		}
		levels := r.Options.Concurrency
		probes := r.gatewayProbes()
		if !loadRows {
			levels, probes = levels[len(levels)-1:], []gatewayProbe{{language: sandbox.LanguagePython, runtime: r.Options.Runtimes[0]}}
		}
		for _, c := range levels {
			for _, pr := range probes {
				r.progress("gateway %s %s %s: %d requests at concurrency %d", m.name, pr.language, pr.runtime, r.Options.Requests, c)
				stop := make(chan struct{})
				peak := make(chan int64, 1)
				go sampleRSS(stop, peak)
				var cpu time.Duration
				res, err := Load(ctx, LoadOptions{URL: tg.url, Token: tg.token, Body: pr.body(m.isolation), Concurrency: c, Requests: r.Options.Requests, Warmup: max(10, c),
					measured: func() func() { return cpuMeter(r.Options.Config.Sandbox.CgroupParent, &cpu) }})
				close(stop)
				p := <-peak
				if m.name == "cold" && p > mem.GatewayPeakKB {
					mem.GatewayPeakKB = p
				}
				if err != nil {
					_ = tg.stop(ctx)
					return err
				}
				if loadRows {
					row := GatewayRow{Mode: m.name, Language: pr.language, Runtime: pr.runtime, Isolation: m.isolation, LoadResult: res}
					if res.Requests > 0 {
						row.CPUPerRun = cpu / time.Duration(res.Requests)
					}
					r.Gateway = append(r.Gateway, row)
				}
			}
		}
		if err := tg.stop(ctx); err != nil {
			return err
		}
	}
	if memory {
		kb, n, err := r.warmJailRSS(ctx)
		if err != nil {
			return err
		}
		mem.PerWarmJailKB, mem.WarmJails = kb, n
		r.Memory = mem
	}
	return nil
}

// warmJailRSS fills a warm pool and averages the RSS of its idle jails
// (every process below this one: nsjail and the waiting harness).
func (r *Report) warmJailRSS(ctx context.Context) (int64, int, error) {
	runner, err := r.newRunner(ctx, r.Options.Runtimes[0], r.Options.WarmPool)
	if err != nil {
		return 0, 0, err
	}
	defer runner.Close()
	// The pool fills for a profile once that profile has been used.
	if _, err := runner.Run(ctx, sandbox.Spec{Source: ProbeSource, Limits: limits.Default}); err != nil {
		return 0, 0, err
	}
	// The harnesses at their blocking read.
	if err := waitWarmReady(ctx, runner, r.Options.WarmPool); err != nil {
		return 0, 0, err
	}
	n := runner.Info().WarmIdle
	return descendantsRSSKB(os.Getpid()) / int64(n), n, nil
}

func (r *Report) overhead(ctx context.Context) error {
	for _, c := range []int{1, 32} {
		n := max(r.Options.Requests*10, 2000)
		r.progress("overhead: %d requests at concurrency %d (no-op executor)", n, c)
		res, err := MeasureOverhead(ctx, OverheadOptions{Config: r.Options.Config, Concurrency: c, Requests: n, Warmup: 100})
		if err != nil {
			return err
		}
		r.Overhead = append(r.Overhead, res)
	}
	return nil
}

func hostLine() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%d CPUs, kernel %s, %s/%s, load average at start %s",
		runtime.NumCPU(), strings.TrimSpace(string(kernel)), runtime.GOOS, runtime.GOARCH,
		strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
}

// subset returns got, or all when got is empty, refusing a name all does
// not have, naming its kind.
func subset(kind string, got, all []string) ([]string, error) {
	if len(got) == 0 {
		return all, nil
	}
	for _, g := range got {
		if !slices.Contains(all, g) {
			return nil, fmt.Errorf("bench: unknown %s %q (want %s)", kind, g, strings.Join(all, ", "))
		}
	}
	return got, nil
}
