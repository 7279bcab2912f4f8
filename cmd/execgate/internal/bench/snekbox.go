package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// SectionSnekbox is the peer row: snekbox (python-discord/snekbox) on
// the same nsjail, driven in-process by Options.Snekbox, beside level
// jail cold and warm in-process, the variants taking turns in batches.
const SectionSnekbox = "snekbox"

// snekboxBatch is how many runs of one variant go before the next
// variant's turn: short enough that a change in the host's load lands on
// every variant alike.
const snekboxBatch = 5

// PeerRow is one variant of the snekbox section.
type PeerRow struct {
	Name string
	Runs int
	Wall Stats
	// CPU is the nsjail process tree's CPU per run (user+sys of nsjail
	// and everything it reaped, from getrusage(RUSAGE_CHILDREN) around
	// the run): for a warm run, the jail it was handed, start included.
	CPU Stats
	// Driver is the driving process's own CPU per run, mean (snekbox's
	// Python around the jail; the runner's Go, with its goroutines).
	Driver time.Duration
	// Process rows time one whole process (a phase of a cold run): no
	// driver.
	Process bool
}

// PeerReport is the snekbox section: Rows[0] is snekbox's.
type PeerReport struct {
	Commit string // the snekbox commit the driver ran
	Config string // the nsjail config snekbox rendered
	Argv   string // snekbox's nsjail command line (placeholders for its per-run log and home)
	Rows   []PeerRow
	args   []string
}

// peerDriver is the snekbox driver process (scripts/snekbox-driver.py).
type peerDriver struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	closed bool
}

type peerRun struct {
	WallNS int64 `json:"wall_ns"`
	CPUNS  int64 `json:"cpu_ns"`
	SelfNS int64 `json:"self_ns"`
}

func startPeerDriver(ctx context.Context, argv []string, stderr io.Writer) (*peerDriver, *PeerReport, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("bench: starting the snekbox driver: %w", err)
	}
	d := &peerDriver{cmd: cmd, in: in, out: bufio.NewScanner(outp)}
	d.out.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var ready struct {
		Ready  bool     `json:"ready"`
		Commit string   `json:"commit"`
		Config string   `json:"config"`
		Args   []string `json:"args"`
	}
	if err := d.read(&ready); err != nil || !ready.Ready {
		d.close()
		return nil, nil, fmt.Errorf("bench: the snekbox driver did not get ready: %v", err)
	}
	return d, &PeerReport{Commit: ready.Commit, Config: ready.Config, Argv: shellQuote(ready.Args), args: ready.Args}, nil
}

func (d *peerDriver) read(v any) error {
	if !d.out.Scan() {
		if err := d.out.Err(); err != nil {
			return err
		}
		return errors.New("the snekbox driver exited")
	}
	return json.Unmarshal(d.out.Bytes(), v)
}

func (d *peerDriver) runs(n int) ([]peerRun, error) {
	if _, err := fmt.Fprintf(d.in, "{\"runs\": %d}\n", n); err != nil {
		return nil, err
	}
	var got struct {
		Runs []peerRun `json:"runs"`
	}
	if err := d.read(&got); err != nil {
		return nil, fmt.Errorf("bench: snekbox: %w", err)
	}
	if len(got.Runs) != n {
		return nil, fmt.Errorf("bench: snekbox answered %d runs of %d", len(got.Runs), n)
	}
	return got.Runs, nil
}

// close ends the driver (EOF on its stdin) and waits for it; once more
// is a no-op.
func (d *peerDriver) close() {
	if d.closed {
		return
	}
	d.closed = true
	d.in.Close()
	_ = d.cmd.Wait()
}

// rusageCPU is the user+sys time of who (RUSAGE_SELF or RUSAGE_CHILDREN).
func rusageCPU(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peerSamples collects one variant's runs.
type peerSamples struct {
	walls, cpus []time.Duration
	driver      time.Duration
}

func (s *peerSamples) add(wall, cpu, driver time.Duration) {
	s.walls = append(s.walls, wall)
	s.cpus = append(s.cpus, cpu)
	s.driver += driver
}

func (s *peerSamples) row(name string) PeerRow {
	n := len(s.walls)
	return PeerRow{Name: name, Runs: n, Wall: statsOf(s.walls), CPU: statsOf(s.cpus), Driver: s.driver / time.Duration(n)}
}

// peerVariant is one row of the snekbox section: batch runs it n times.
type peerVariant struct {
	name  string
	batch func(n int) error
	s     peerSamples
	// process rows time a whole process; their driver CPU is not theirs.
	process bool
	stop    func() // ends what the variant started; nil: nothing
}

// snekbox measures the peer beside level jail: rounds of snekboxBatch
// runs of each variant in turn (snekbox; Runner.Run cold and with a warm
// pool, back to back as a closed loop at concurrency 1 sends them, in
// process and through an in-process gateway over HTTP; and the phases of
// a cold jail as whole processes), until each has Options.Runs runs.
func (r *Report) snekbox(ctx context.Context) error {
	rt := r.Options.Runtimes[0]
	r.progress("snekbox: starting the driver: %s", shellQuote(r.Options.Snekbox))
	var stderr tailBuffer // read once the driver is gone
	d, rep, err := startPeerDriver(ctx, r.Options.Snekbox, &stderr)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, stderr.b)
	}
	defer d.close()
	cold, err := r.newRunner(ctx, rt, 0)
	if err != nil {
		return err
	}
	defer cold.Close()
	warm, err := r.newRunner(ctx, rt, r.Options.WarmPool)
	if err != nil {
		return err
	}
	defer warm.Close()
	probe := sandbox.Spec{Source: ProbeSource, Limits: limits.Default}
	// One unmeasured run each: page cache, cgroup parents, the warm
	// pool's profile registered.
	for _, run := range []*sandbox.Runner{cold, warm} {
		if err := runProbe(ctx, run, probe); err != nil {
			return err
		}
	}
	phases, cleanup, err := r.peerPhases(cold, rep)
	if err != nil {
		return err
	}
	defer cleanup()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()

	var variants []*peerVariant
	peer := &peerVariant{name: "snekbox (in-process, as POST /eval runs it)"}
	peer.batch = func(n int) error {
		runs, err := d.runs(n)
		if err != nil {
			d.close()
			return fmt.Errorf("%w\n%s", err, stderr.b)
		}
		for _, p := range runs {
			peer.s.add(time.Duration(p.WallNS), time.Duration(p.CPUNS), time.Duration(p.SelfNS))
		}
		return nil
	}
	inProcess := func(name string, run *sandbox.Runner) *peerVariant {
		v := &peerVariant{name: name}
		v.batch = func(n int) error {
			for i := 0; i < n; i++ {
				c0, s0, t0 := rusageCPU(syscall.RUSAGE_CHILDREN), rusageCPU(syscall.RUSAGE_SELF), time.Now()
				if err := runProbe(ctx, run, probe); err != nil {
					return err
				}
				wall := time.Since(t0)
				v.s.add(wall, rusageCPU(syscall.RUSAGE_CHILDREN)-c0, rusageCPU(syscall.RUSAGE_SELF)-s0)
			}
			return nil
		}
		return v
	}
	// Over HTTP: a gateway (auth, policy, quota, audit) in this process
	// serving each runner above, one request at a time.
	overHTTP := func(name string, run *sandbox.Runner) (*peerVariant, error) {
		tg, err := startTarget(ctx, r.Options.Config, 0, []string{rt}, app.Options{Runner: run})
		if err != nil {
			return nil, err
		}
		v := &peerVariant{name: name, stop: func() { _ = tg.stop(context.WithoutCancel(ctx)) }}
		body := []byte(probeBody("", ""))
		v.batch = func(n int) error {
			for i := 0; i < n; i++ {
				c0, s0, t0 := rusageCPU(syscall.RUSAGE_CHILDREN), rusageCPU(syscall.RUSAGE_SELF), time.Now()
				resp, err := tg.post(ctx, body)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				wall := time.Since(t0)
				if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Execution-Status") != "ok" {
					return fmt.Errorf("bench: %s: HTTP %d, execution status %q", name, resp.StatusCode, resp.Header.Get("X-Execution-Status"))
				}
				v.s.add(wall, rusageCPU(syscall.RUSAGE_CHILDREN)-c0, rusageCPU(syscall.RUSAGE_SELF)-s0)
			}
			return nil
		}
		return v, nil
	}
	variants = append(variants, peer,
		inProcess("execgate level jail cold (Runner.Run)", cold),
		inProcess(fmt.Sprintf("execgate level jail warm, pool %d (Runner.Run back to back)", r.Options.WarmPool), warm))
	for _, h := range []struct {
		name string
		run  *sandbox.Runner
	}{{"execgate level jail cold, HTTP c=1 (POST /v1/execute)", cold}, {fmt.Sprintf("execgate level jail warm, pool %d, HTTP c=1", r.Options.WarmPool), warm}} {
		v, err := overHTTP(h.name, h.run)
		if err != nil {
			return err
		}
		defer v.stop()
		variants = append(variants, v)
	}
	for _, ph := range phases {
		v := &peerVariant{name: ph.name, process: true}
		v.batch = func(n int) error {
			for i := 0; i < n; i++ {
				wall, cpu, err := runProcess(ctx, ph.name, ph.p, devnull)
				if err != nil {
					return err
				}
				v.s.add(wall, cpu, 0)
			}
			return nil
		}
		variants = append(variants, v)
	}
	for _, v := range variants[3:] { // warm-up of the HTTP and process rows
		if err := v.batch(1); err != nil {
			return err
		}
		v.s = peerSamples{}
	}
	for round := 0; len(peer.s.walls) < r.Options.Runs; round++ {
		r.progress("snekbox: round %d: %d runs of each of %d variants", round+1, snekboxBatch, len(variants))
		for _, v := range variants {
			// Untimed: one round's refills do not run into the next
			// round's other variants, and warm samples get started jails.
			if err := waitWarmReady(ctx, warm, r.Options.WarmPool); err != nil {
				return err
			}
			if err := v.batch(snekboxBatch); err != nil {
				return err
			}
		}
	}
	for _, v := range variants {
		row := v.s.row(v.name)
		row.Process = v.process
		rep.Rows = append(rep.Rows, row)
	}
	r.Peer = rep
	return nil
}

// peerPhase is one whole process that is part of a cold jail's run.
type peerPhase struct {
	name string
	p    procSpec
}

// peerPhases are the parts of a cold run, each timed as a whole process:
// nsjail alone, the interpreter alone on the host, raw nsjail with the
// runner's profile running the bare interpreter and the harness with the
// probe, and raw nsjail with snekbox's config (snekbox without its
// Python around the jail). cleanup removes their files.
func (r *Report) peerPhases(runner *sandbox.Runner, rep *PeerReport) (_ []peerPhase, cleanup func(), err error) {
	var files []string
	cleanup = func() {
		for _, f := range files {
			os.RemoveAll(f)
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	argv, req, err := runner.RawCommand(sandbox.Spec{Source: ProbeSource, Limits: limits.Default})
	if err != nil {
		return nil, nil, err
	}
	passCfg, err := pythonPassConfig(argv[2])
	if err != nil {
		return nil, nil, err
	}
	files = append(files, passCfg)
	passArgv := slices.Clone(argv)
	passArgv[2] = passCfg
	// snekbox's own nsjail command, its per-run log and tmpfs home
	// replaced by /dev/null and a directory anyone may write, as
	// snekbox makes its home.
	home, err := os.MkdirTemp("", "execgate-bench-snekbox-home-")
	if err != nil {
		return nil, nil, err
	}
	files = append(files, home)
	if err := os.Chmod(home, 0o777); err != nil {
		return nil, nil, err
	}
	snek, err := peerCommand(rep.args, os.DevNull, home)
	if err != nil {
		return nil, nil, err
	}
	python := r.Options.Config.Sandbox.PythonPath
	return []peerPhase{
		{"phase: nsjail alone (`nsjail --help`: exec, dynamic linking, flags)", procSpec{argv: []string{argv[0], "--help"}}},
		{"phase: the interpreter alone on the host (`" + python + " -I -S -B -c pass`)", procSpec{argv: []string{python, "-I", "-S", "-B", "-c", "pass"}}},
		{"phase: raw nsjail, execgate's profile: interpreter (`-I -S -B -u -c pass`)", procSpec{argv: passArgv, extraFiles: 2}},
		{"phase: raw nsjail, execgate's profile: harness + probe", procSpec{argv: argv, stdin: req, extraFiles: 2}},
		{"phase: raw nsjail, snekbox's config: `python -c CODE` (snekbox without its Python driver)", procSpec{argv: snek, wantOK: wantPeerOutput}},
	}, cleanup, nil
}

// The driver's placeholders in snekbox's command line (snekbox-driver.py).
const (
	peerLogPlaceholder  = "LOG"
	peerHomePlaceholder = "HOME"
)

// peerCommand is snekbox's nsjail command line as its driver announced it
// (args), with the placeholders of its per-run log and home replaced by
// log and home; an error if either is missing.
func peerCommand(args []string, log, home string) ([]string, error) {
	out := slices.Clone(args)
	found := 0
	for i, a := range out {
		switch a {
		case peerLogPlaceholder:
			out[i] = log
			found++
		case peerHomePlaceholder + ":home":
			out[i] = home + ":home"
			found++
		}
	}
	if found != 2 {
		return nil, fmt.Errorf("bench: snekbox's command %q lacks its log or home placeholder", shellQuote(args))
	}
	return out, nil
}

// wantPeerOutput checks the output of the driver's CODE.
func wantPeerOutput(out []byte) error {
	if string(out) != "{'ok': True}\n" {
		return fmt.Errorf("snekbox's command printed %q", out)
	}
	return nil
}

func runProbe(ctx context.Context, run *sandbox.Runner, spec sandbox.Spec) error {
	res, err := run.Run(ctx, spec)
	if err != nil {
		return err
	}
	if res.Status != sandbox.StatusOK {
		return fmt.Errorf("bench: probe run: status %s %v", res.Status, res.Error)
	}
	return nil
}

// markdown writes the section's table, each row's ratios to snekbox's.
func (p *PeerReport) markdown(w io.Writer, runs int) {
	fmt.Fprintf(w, "### Level jail beside snekbox on the same nsjail (trivial run, %d runs each, in batches of %d taking turns)\n\n", runs, snekboxBatch)
	fmt.Fprintln(w, "| variant | wall p50 | wall p95 | CPU p50 (nsjail tree) | CPU p95 | driver CPU/run | wall p50 / snekbox | CPU p50 / snekbox |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	base := p.Rows[0]
	for _, row := range p.Rows {
		driver := "–"
		if !row.Process {
			driver = ms(row.Driver)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.2f× | %.2f× |\n", row.Name, ms(row.Wall.Median), ms(row.Wall.P95), ms(row.CPU.Median), ms(row.CPU.P95), driver,
			float64(row.Wall.Median)/float64(base.Wall.Median), float64(row.CPU.Median)/float64(base.CPU.Median))
	}
	fmt.Fprintf(w, "\nsnekbox %s: `NsJail(...).python3([\"-c\", CODE])` as its POST /eval does, config %s: `%s`. CPU: getrusage(RUSAGE_CHILDREN) around each run, for both (a warm run's is the whole jail it was handed, its start included); a phase row's is its process tree's. Driver CPU: the driving process's own (on the HTTP rows the gateway's and its client's, in one process). Before each batch the warm pool is full again, its jails started at least %s before (waiting for their request).\n\n", p.Commit, p.Config, p.Argv, warmSettle)
}
