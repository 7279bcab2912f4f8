package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/uids"
)

// hostUID is the host uid a jail's facts show in its uid_map.
func hostUID(t *testing.T, facts map[string]any) int {
	t.Helper()
	m, _ := facts["uid_map"].([]any)
	if len(m) != 3 || fmt.Sprint(m[0]) != "99999" || fmt.Sprint(m[2]) != "1" {
		t.Fatalf("uid_map %v, want 99999 <host uid> 1", facts["uid_map"])
	}
	uid, err := strconv.Atoi(fmt.Sprint(m[1]))
	if err != nil {
		t.Fatalf("uid_map %v: %v", m, err)
	}
	return uid
}

// holdTool takes every inotify instance and every process the jail may
// have, names itself so the test finds it on the host, and holds them
// until it is stopped.
const holdTool = `
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
def run(args, context):
    fds = []
    while True:
        fd = libc.inotify_init()
        if fd < 0:
            break
        fds.append(fd)
    kids = []
    while True:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        kids.append(pid)
    libc.prctl(15, b"eg-hold", 0, 0, 0)  # PR_SET_NAME: found by the test
    time.sleep(60)
`

// probeTool checks what the other tool's exhaustion must not reach.
const probeTool = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def run(args, context):
    fd = libc.inotify_init()
    inotify = "ok" if fd >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        fork = "ok"
    except OSError as e:
        fork = errno.errorcode.get(e.errno, "?")
    return {"inotify_init": inotify, "fork": fork, "uid_map": open("/proc/self/uid_map").read().split()}
`

func TestOneJailExhaustingPerUserLimitsDoesNotReachAnother(t *testing.T) {
	r := newRunner(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan sandbox.Result, 1)
	go func() {
		res, _ := r.Run(ctx, sandbox.Spec{ExecutionID: "tenant-a", TenantID: "a", Source: holdTool,
			Limits: sandbox.Limits{TimeoutMS: 30000, CPUMS: 30000}.Or(limits.Default)})
		held <- res
	}()
	// Wait (polling, with a deadline) until tenant A's tool holds them all.
	maxInstances := readSysctl(t, "/proc/sys/fs/inotify/max_user_instances")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if n := inotifyHeldBy("eg-hold"); n >= maxInstances {
			break
		}
		select {
		case res := <-held:
			t.Fatalf("tenant A's tool ended early: %s", dump(res))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant A's tool never held %d inotify instances (holds %d)", maxInstances, inotifyHeldBy("eg-hold"))
		}
		time.Sleep(20 * time.Millisecond)
	}

	f := jailFacts(t, r, sandbox.Spec{ExecutionID: "tenant-b", TenantID: "b", Source: probeTool, Limits: limits.Default})
	if f["inotify_init"] != "ok" {
		t.Errorf("tenant B's inotify_init while A holds %d instances: %v, want ok", maxInstances, f["inotify_init"])
	}
	if f["fork"] != "ok" {
		t.Errorf("tenant B's fork while A holds its processes: %v, want ok", f["fork"])
	}
	// Nor the host's root (the gateway's own file watches, system services).
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
		t.Errorf("host root's inotify_init while a jail holds %d instances: %v", maxInstances, err)
	} else {
		unix.Close(fd)
	}
	cancel()
	<-held
}

func TestWarmJailHoldsItsUIDUntilItIsGone(t *testing.T) {
	// A one-uid range: the warm jail holds it, so a cold run of another
	// profile finds none until the warm jail has served its run.
	r := newRunner(t, func(c *sandbox.Config) { c.WarmPool = 1; c.UIDRange = "165400-165400" })
	deadline := time.Now().Add(20 * time.Second)
	for sandbox.WarmIdle(r) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the warm jail never became idle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err := r.Run(context.Background(), sandbox.Spec{Source: probeTool, Limits: sandbox.Limits{MemoryMB: 128}.Or(limits.Default)})
	if !errors.Is(err, uids.ErrExhausted) {
		t.Fatalf("cold run while the warm jail holds the only uid: %v, want ErrUIDsExhausted", err)
	}
	f := jailFacts(t, r, sandbox.Spec{Source: probeTool, Limits: limits.Default})
	if got := hostUID(t, f); got != 165400 {
		t.Errorf("the warm jail ran as host uid %d, want 165400", got)
	}
}

func readSysctl(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// inotifyHeldBy counts the inotify descriptors of the host processes named
// comm.
func inotifyHeldBy(comm string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range procs {
		b, err := os.ReadFile(c)
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		fds, _ := filepath.Glob(filepath.Join(filepath.Dir(c), "fd", "*"))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && l == "anon_inode:inotify" {
				n++
			}
		}
	}
	return n
}
