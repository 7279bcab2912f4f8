package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/execgate/execgate/internal/slowclient"
)

// selfRSSKB is this process's resident set (VmRSS) in KiB.
func selfRSSKB() int64 { return slowclient.RSSKB(os.Getpid()) }

// sampleRSS records this process's peak RSS every 20 ms until stop closes,
// then sends the peak.
func sampleRSS(stop <-chan struct{}, peak chan<- int64) {
	var p int64
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if v := selfRSSKB(); v > p {
			p = v
		}
		select {
		case <-stop:
			peak <- p
			return
		case <-t.C:
		}
	}
}

// descendantsRSSKB sums the RSS of every process below root.
func descendantsRSSKB(root int) int64 {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised comm: state ppid ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var sum int64
	stack := append([]int(nil), children[root]...)
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		sum += slowclient.RSSKB(pid)
		stack = append(stack, children[pid]...)
	}
	return sum
}
