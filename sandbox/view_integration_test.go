package sandbox_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"golang.org/x/sys/unix"
)

// TestTheJailReachesItsDirsThroughTheView: the rootfs, deps and work dirs
// may sit below a directory only root can enter (a 0700 state dir); a
// directory the user made private itself is refused with a hint.
func TestTheJailReachesItsDirsThroughTheView(t *testing.T) {
	needJail(t)
	private := t.TempDir() // 0700, like mktemp -d
	state := filepath.Join(private, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(state, "rootfs")
	if out, err := exec.Command("cp", "-a", rootfsDir(t), rootfs).CombinedOutput(); err != nil {
		t.Fatalf("copying the rootfs: %v\n%s", err, out)
	}
	cfg := func(c *sandbox.Config) {
		c.RootfsDir = rootfs
		c.WorkDir = filepath.Join(state, "runs")
		c.DepsDir = filepath.Join(state, "deps")
	}

	t.Run("below a private state dir, runs work", func(t *testing.T) {
		r := newRunner(t, cfg)
		res := run(t, r, sandbox.Spec{Source: "def run(args, context):\n    return {'ok': True}\n", Limits: limits.Default})
		if res.Status != sandbox.StatusOK {
			t.Fatalf("probe: %s", dump(res))
		}
		view := r.Info().ViewDir
		if !strings.HasPrefix(view, sandbox.DefaultRuntimeDir+"/view-"+strconv.Itoa(os.Getpid())+"-") {
			t.Errorf("Info().ViewDir = %q, want %s/view-<pid>-<hash>", view, sandbox.DefaultRuntimeDir)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(view); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Close left the view %s: %v", view, err)
		}
	})

	t.Run("a rootfs dir made private is refused with a hint", func(t *testing.T) {
		if err := os.Chmod(rootfs, 0o700); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(rootfs, 0o755)
		c := sandbox.Config{CgroupParent: cgroupParent}
		cfg(&c)
		r, err := sandbox.NewRunner(c)
		if err == nil {
			r.Close()
			t.Fatal("NewRunner accepted a rootfs dir the jail cannot enter")
		}
		var ue *sandbox.UnavailableError
		if !errors.As(err, &ue) || ue.Hint != "chmod o+x "+rootfs || !strings.Contains(ue.Reason, rootfs) {
			t.Fatalf("NewRunner: %v (%#v), want an UnavailableError naming %s with the hint chmod o+x", err, ue, rootfs)
		}
		// (Tests run one at a time here: no other runner of this process
		// has a view open.)
		if m, _ := filepath.Glob(filepath.Join(sandbox.DefaultRuntimeDir, "view-"+strconv.Itoa(os.Getpid())+"-*")); len(m) != 0 {
			t.Errorf("a refused runner left its view mounted: %v", m)
		}
	})
}

func TestANewRunnerUnmountsTheViewsOfDeadProcesses(t *testing.T) {
	needJail(t)
	// A view as a killed execgate leaves it: a tmpfs named after a pid
	// that is gone.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(sandbox.DefaultRuntimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(sandbox.DefaultRuntimeDir, "view-"+strconv.Itoa(dead.Process.Pid)+"-0123456789ab")
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("execgate-view", left, "tmpfs", 0, "size=16k"); err != nil {
		os.Remove(left)
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(left, unix.MNT_DETACH); os.Remove(left) })

	newRunner(t, nil)
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead process's view %s is still there: %v", left, err)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), left) {
		t.Errorf("the dead process's view %s is still mounted", left)
	}
}
