package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/execgate/execgate/internal/stats"
)

// Sample is the distribution of repeated whole-process runs.
type Sample struct {
	Name string
	// Runtime is the Python runtime the row ran ("" for rows outside any
	// runtime: the bare host interpreter, JavaScript).
	Runtime string
	Command string // what was run, for the report
	Runs    int
	Wall    Stats
	CPU     Stats // user+sys of the process tree, from rusage
}

// Stats are order statistics of durations.
type Stats struct {
	Median, P95, Min time.Duration
}

func statsOf(d []time.Duration) Stats {
	s := slices.Clone(d)
	slices.Sort(s)
	return Stats{Median: median(s), P95: stats.Percentile(s, 0.95), Min: s[0]}
}

func median(sorted []time.Duration) time.Duration {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// procSpec is one process to start repeatedly.
type procSpec struct {
	argv       []string
	stdin      []byte
	env        []string           // the environment; nil: this process's
	extraFiles int                // how many fds (3, 4, …) to open on /dev/null
	wantOK     func([]byte) error // checks stdout; nil: exit status 0 is enough
}

// sampleProcess runs p n times (after one unmeasured warm-up, so page cache
// and cgroup parents are in place) and returns wall and CPU distributions.
func sampleProcess(ctx context.Context, name string, p procSpec, n int) (*Sample, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	if _, _, err := runProcess(ctx, name, p, devnull); err != nil {
		return nil, err
	}
	walls := make([]time.Duration, 0, n)
	cpus := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		w, c, err := runProcess(ctx, name, p, devnull)
		if err != nil {
			return nil, err
		}
		walls = append(walls, w)
		cpus = append(cpus, c)
	}
	return &Sample{Name: name, Command: shellQuote(p.argv), Runs: n, Wall: statsOf(walls), CPU: statsOf(cpus)}, nil
}

// runProcess runs p once, its extra fds on devnull, and returns its wall
// time and the CPU time (user+sys, from its rusage) of its process tree.
func runProcess(ctx context.Context, name string, p procSpec, devnull *os.File) (wall, cpu time.Duration, err error) {
	cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
	cmd.Stdin = bytes.NewReader(p.stdin)
	cmd.Env = p.env
	var out bytes.Buffer
	cmd.Stdout = &out
	var errb bytes.Buffer
	cmd.Stderr = &errb
	for i := 0; i < p.extraFiles; i++ {
		cmd.ExtraFiles = append(cmd.ExtraFiles, devnull)
	}
	t0 := time.Now()
	err = cmd.Run()
	wall = time.Since(t0)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w\n%s%s", name, err, out.Bytes(), errb.Bytes())
	}
	if p.wantOK != nil {
		if err := p.wantOK(out.Bytes()); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", name, err)
		}
	}
	ps := cmd.ProcessState
	return wall, ps.UserTime() + ps.SystemTime(), nil
}

// shellQuote renders argv for a human to copy.
func shellQuote(argv []string) string {
	var b bytes.Buffer
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && !bytes.ContainsAny([]byte(a), " \t\n'\"\\$`|&;<>(){}*?") {
			b.WriteString(a)
			continue
		}
		b.WriteByte('\'')
		b.Write(bytes.ReplaceAll([]byte(a), []byte("'"), []byte(`'\''`)))
		b.WriteByte('\'')
	}
	return b.String()
}
