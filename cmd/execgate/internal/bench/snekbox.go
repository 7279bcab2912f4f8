package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

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
}

// PeerReport is the snekbox section: Rows[0] is snekbox's.
type PeerReport struct {
	Commit string // the snekbox commit the driver ran
	Config string // the nsjail config snekbox rendered
	Argv   string // snekbox's nsjail command line (placeholders for its per-run log and home)
	Rows   []PeerRow
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
	return d, &PeerReport{Commit: ready.Commit, Config: ready.Config, Argv: shellQuote(ready.Args)}, nil
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

// snekbox measures the peer beside level jail: rounds of snekboxBatch
// runs of snekbox, of Runner.Run cold and of Runner.Run with a warm pool
// (back to back, as a closed loop at concurrency 1 sends them), until
// each has Options.Runs runs.
func (r *Report) snekbox(ctx context.Context) error {
	if len(r.Options.Snekbox) == 0 {
		return errors.New("bench: section snekbox needs the driver's command (--snekbox; scripts/bench-snekbox.sh sets it up)")
	}
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
	var peer, jailCold, jailWarm peerSamples
	inProcess := func(run *sandbox.Runner, s *peerSamples) error {
		for i := 0; i < snekboxBatch; i++ {
			c0, s0, t0 := rusageCPU(syscall.RUSAGE_CHILDREN), rusageCPU(syscall.RUSAGE_SELF), time.Now()
			if err := runProbe(ctx, run, probe); err != nil {
				return err
			}
			wall := time.Since(t0)
			s.add(wall, rusageCPU(syscall.RUSAGE_CHILDREN)-c0, rusageCPU(syscall.RUSAGE_SELF)-s0)
		}
		return nil
	}
	for round := 0; len(peer.walls) < r.Options.Runs; round++ {
		r.progress("snekbox: round %d: %d runs each of snekbox, jail cold, jail warm", round+1, snekboxBatch)
		if err := r.waitWarm(ctx, warm); err != nil {
			return err
		}
		runs, err := d.runs(snekboxBatch)
		if err != nil {
			d.close()
			return fmt.Errorf("%w\n%s", err, stderr.b)
		}
		for _, p := range runs {
			peer.add(time.Duration(p.WallNS), time.Duration(p.CPUNS), time.Duration(p.SelfNS))
		}
		if err := inProcess(cold, &jailCold); err != nil {
			return err
		}
		if err := inProcess(warm, &jailWarm); err != nil {
			return err
		}
	}
	rep.Rows = []PeerRow{peer.row("snekbox (in-process, its nsjail config)"), jailCold.row("execgate level jail cold (Runner.Run)"), jailWarm.row(fmt.Sprintf("execgate level jail warm, pool %d (Runner.Run back to back)", r.Options.WarmPool))}
	r.Peer = rep
	return nil
}

// waitWarm waits (untimed) until run's warm pool is full again, so one
// round's refills do not run into the next round's other variants.
func (r *Report) waitWarm(ctx context.Context, run *sandbox.Runner) error {
	deadline := time.Now().Add(warmWait)
	for run.Info().WarmIdle < r.Options.WarmPool {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the warm pool did not refill in %s", warmWait)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
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
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.2f× | %.2f× |\n", row.Name, ms(row.Wall.Median), ms(row.Wall.P95), ms(row.CPU.Median), ms(row.CPU.P95), ms(row.Driver),
			float64(row.Wall.Median)/float64(base.Wall.Median), float64(row.CPU.Median)/float64(base.CPU.Median))
	}
	fmt.Fprintf(w, "\nsnekbox %s: `NsJail(...).python3([\"-c\", CODE])` as its POST /eval does, config %s: `%s`. CPU: getrusage(RUSAGE_CHILDREN) around each run, for both (a warm run's is the whole jail it was handed, its start included). Driver CPU: the driving process's own.\n\n", p.Commit, p.Config, p.Argv)
}
