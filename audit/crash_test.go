package audit_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/audit/audittest"
)

// crashChildEnv makes the test binary act as a writer that acknowledges each
// record on stdout once Record returned, until it is killed.
const crashChildEnv = "EXECGATE_AUDIT_CRASH_CHILD"

func TestAcknowledgedRecordsSurviveSIGKILL(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcknowledgedRecordsSurviveSIGKILL$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	acked := map[string]bool{}
	sc := bufio.NewScanner(out)
	deadline := time.Now().Add(30 * time.Second)
	killed := false
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "ack ")
		if !ok {
			continue
		}
		acked[id] = true
		if !killed && len(acked) >= 300 {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true // keep reading: acks already in the pipe count too
		}
		if time.Now().After(deadline) {
			t.Fatal("child did not acknowledge 300 records in 30s")
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatalf("child exited after %d acks without being killed", len(acked))
	}

	// Restart on the same file: the torn tail (if any) is dropped and
	// writing goes on.
	l, err := audit.New(audit.Config{File: path})
	if err != nil {
		t.Fatalf("reopening after SIGKILL: %v", err)
	}
	r := records()["ok run"]
	r.ExecutionID = "after-restart"
	if err := l.Record(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	l.Close()

	found := map[string]bool{}
	for _, ln := range audittest.ReadFile(t, path) { // every line validates
		found[ln.Record.ExecutionID] = true
	}
	var missing []string
	for id := range acked {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged records are missing after SIGKILL, e.g. %v", len(missing), len(acked), missing[:min(5, len(missing))])
	}
	if !found["after-restart"] {
		t.Fatal("the record written after restart is missing")
	}
	t.Logf("%d acknowledged records, %d on disk", len(acked), len(found)-1)
}

func crashChild(path string) {
	l, err := audit.New(audit.Config{File: path, MaxSizeMB: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex // guards stdout, so ack lines do not interleave
	src := strings.Repeat("z", 20<<10)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; i < 100000; i++ {
				r := records()["tool error with source recorded"]
				r.ExecutionID = fmt.Sprintf("c%d-%d", w, i)
				r.Source = src
				if err := l.Record(context.Background(), r); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Printf("ack %s\n", r.ExecutionID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(3)
}
