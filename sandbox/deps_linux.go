package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// depsInstaller installs requirement sets into the cache. It is safe for
// concurrent use.
type depsInstaller struct {
	dir       string       // Config.DepsDir
	check     func() error // can the jail reach dir (through the view)?
	python    string       // the host interpreter the rootfs was built from
	pyVersion string
	timeout   time.Duration
	findUV    func() (string, error)
	getenv    func(string) string

	mu       sync.Mutex // guards inflight
	inflight map[string]*depsCall
}

// depsCall is one install in progress; done is closed when it finished.
type depsCall struct {
	done    chan struct{}
	dir     string
	failure *ErrorInfo
	err     error
}

// ensure returns the host directory holding pins (normalised), installing
// it first when needed. A set that cannot be installed (the index has no
// such version, no wheel for this interpreter, the index is unreachable)
// is a *ErrorInfo of type DependencyError; a host that cannot install at
// all (no uv, an unusable deps dir) is an *UnavailableError.
func (d *depsInstaller) ensure(ctx context.Context, pins []string) (string, *ErrorInfo, error) {
	key := depsKey(d.pyVersion, pins)
	final := filepath.Join(d.dir, key)
	if isDir(final) {
		return final, nil, nil
	}
	d.mu.Lock()
	c, ok := d.inflight[key]
	if !ok {
		c = &depsCall{done: make(chan struct{})}
		d.inflight[key] = c
		// The install outlives a caller that gives up: others may be
		// waiting for it, and the next run reuses it.
		go func() {
			c.dir, c.failure, c.err = d.install(context.WithoutCancel(ctx), key, pins)
			d.mu.Lock()
			delete(d.inflight, key)
			d.mu.Unlock()
			close(c.done)
		}()
	}
	d.mu.Unlock()
	select {
	case <-c.done:
		return c.dir, c.failure, c.err
	case <-ctx.Done():
		return "", &ErrorInfo{Type: ErrDependencyError, Message: "the caller went away while the requirements were being installed: " + ctx.Err().Error()}, nil
	}
}

func (d *depsInstaller) install(ctx context.Context, key string, pins []string) (string, *ErrorInfo, error) {
	final := filepath.Join(d.dir, key)
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return "", nil, &UnavailableError{Reason: "sandbox.deps_dir: creating " + d.dir, Err: err}
	}
	if err := d.check(); err != nil {
		return "", nil, err
	}
	unlock, err := lockFile(ctx, final+".lock")
	if err != nil {
		return "", nil, &UnavailableError{Reason: "sandbox.deps_dir: locking " + final, Err: err}
	}
	defer unlock()
	if isDir(final) { // another process installed it while we waited
		return final, nil, nil
	}
	uv, err := d.findUV()
	if err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp(d.dir, ".tmp-"+key[:16]+"-")
	if err != nil {
		return "", nil, &UnavailableError{Reason: "sandbox.deps_dir: creating a build directory", Err: err}
	}
	defer os.RemoveAll(tmp) // a no-op once renamed into place
	cache := filepath.Join(d.dir, ".cache")
	args := []string{uv, "pip", "install",
		"--target", tmp,
		"--python", d.python,
		"--only-binary", ":all:", // wheels only: no package code runs here
		"--no-deps", // exactly the pins the policy saw
		"--no-config", "--no-python-downloads",
		"--link-mode", "copy",
		"--compile-bytecode",
		"--system-certs",
		"--cache-dir", cache,
		"--color", "never", "--no-progress",
		"--",
	}
	args = append(args, pins...)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + cache, "LANG=C.UTF-8"}
	for _, k := range installerEnv {
		if v := d.getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	out := &capture{max: maxInstallerOutput}
	cmd := exec.CommandContext(ctx, uv, args[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, d.dir, out, out
	// uv runs the interpreter (to read its tags) and may leave helpers:
	// at the timeout, the whole process group goes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	if runErr != nil {
		var exitErr *exec.ExitError
		switch {
		case ctx.Err() != nil:
			return "", &ErrorInfo{Type: ErrDependencyError,
				Message:   fmt.Sprintf("installing %s timed out after %s", strings.Join(pins, " "), d.timeout),
				Traceback: out.text()}, nil
		case errors.As(runErr, &exitErr):
			return "", &ErrorInfo{Type: ErrDependencyError,
				Message:   fmt.Sprintf("installing %s failed (uv exited with status %d)", strings.Join(pins, " "), exitErr.ExitCode()),
				Traceback: out.text()}, nil
		default:
			return "", nil, &UnavailableError{Reason: "running uv " + uv, Hint: uvSetupHint, Err: runErr}
		}
	}
	_ = os.Remove(filepath.Join(tmp, ".lock")) // uv's own lock file
	if err := sealDeps(tmp); err != nil {
		return "", nil, &UnavailableError{Reason: "sandbox.deps_dir: preparing " + tmp, Err: err}
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", nil, &UnavailableError{Reason: "sandbox.deps_dir: moving the install into place", Err: err}
	}
	return final, nil, nil
}

// sealDeps makes an installed tree readable by the jail and writable by
// nobody but its owner: directories 0755, files 0644 (0755 when
// executable), no setuid/setgid, no symlinks leaving the tree.
func sealDeps(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode().Type() == fs.ModeSymlink:
			t, err := filepath.EvalSymlinks(p)
			if err != nil {
				return os.Remove(p)
			}
			if rel, err := filepath.Rel(root, t); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return os.Remove(p) // would leave the tree
			}
			return nil
		case fi.IsDir():
			return os.Chmod(p, 0o755)
		case fi.Mode().IsRegular():
			if fi.Mode().Perm()&0o111 != 0 {
				return os.Chmod(p, 0o755)
			}
			return os.Chmod(p, 0o644)
		default:
			return os.Remove(p) // no fifos, sockets or devices
		}
	})
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// lockFile takes an exclusive flock on path (created if needed), polling
// until ctx ends. The returned function releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
