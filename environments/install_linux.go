package environments

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/execgate/execgate/sandbox"
)

// depsInstaller installs requirement sets into the cache. It is safe for
// concurrent use.
type depsInstaller struct {
	dir    string       // Config.DepsDir
	check  func() error // can the jail reach dir (through the view)?
	python string       // the interpreter uv installs for (forRuntime)
	// compile, when set, runs the runtime's interpreter on the host
	// (forRuntime): bytecode is compiled with it instead of by uv.
	compile   []string
	pyVersion string
	// platform is uv's --python-platform for installs ("": uv reads the
	// interpreter's); a runtime built from packages has its tree's.
	platform string
	timeout  time.Duration
	index    sandbox.PackageIndex // where uv looks
	maxBytes int64                // an installed set's size cap; 0: none
	findUV   func() (string, error)
	getenv   func(string) string

	mu       sync.Mutex // guards inflight
	inflight map[string]*depsCall
}

// depsCall is one install in progress; done is closed when it finished.
type depsCall struct {
	done    chan struct{}
	dir     string
	failure *sandbox.ErrorInfo
	err     error
}

// ensure returns the host directory holding pins (normalised), installing
// it first when needed. A set that cannot be installed (the index has no
// such version, no wheel for this interpreter, the index is unreachable)
// is a *sandbox.ErrorInfo of type DependencyError; a host that cannot install at
// all (no uv, an unusable deps dir) is an *UnavailableError.
func (d *depsInstaller) ensure(ctx context.Context, pins []string) (string, *sandbox.ErrorInfo, error) {
	args := append([]string{"--no-deps", "--"}, pins...) // exactly the pins the policy saw
	dir, _, failure, err := d.ensureKey(ctx, depsKey(d.pyVersion, pins), strings.Join(pins, " "), d.uvFill(args))
	return dir, failure, err
}

// fill writes an environment into tmp (an empty directory below the deps
// dir). A set that cannot be installed is a DependencyError (the
// *sandbox.ErrorInfo); an error means the host cannot install at all.
type fill func(ctx context.Context, tmp, what string) (*sandbox.ErrorInfo, error)

// uvFill installs with uv: args end its command line (after the common
// flags).
func (d *depsInstaller) uvFill(extra []string) fill {
	return func(ctx context.Context, tmp, what string) (*sandbox.ErrorInfo, error) {
		uv, err := d.findUV()
		if err != nil {
			return nil, err
		}
		args := []string{"pip", "install",
			"--target", tmp,
			"--python", d.python,
			"--only-binary", ":all:", // wheels only: no package code runs here
			"--no-config", "--no-python-downloads",
			"--link-mode", "copy",
			"--system-certs",
			"--cache-dir", d.uvCacheDir(),
			"--color", "never", "--no-progress",
		}
		if d.compile == nil {
			args = append(args, "--compile-bytecode")
		}
		if d.platform != "" {
			args = append(args, "--python-platform", d.platform)
		}
		args = append(args, d.indexArgs()...)
		args = append(args, extra...)
		failure, err := d.runUV(ctx, uv, "installing "+what, args)
		if failure != nil || err != nil {
			return failure, err
		}
		if d.compile != nil {
			compile := append(append([]string(nil), d.compile...), "-I", "-S", "-m", "compileall", "-q", "-j", "1", tmp)
			if failure, err := d.runTool(ctx, "compiling "+what, compile); failure != nil || err != nil {
				return failure, err
			}
		}
		_ = os.Remove(filepath.Join(tmp, ".lock")) // uv's own lock file
		return nil, nil
	}
}

// ensureKey is ensure for any set: key names its directory, what describes
// it in errors, fill writes it. led says this call started the install
// (the others waited for it).
func (d *depsInstaller) ensureKey(ctx context.Context, key, what string, fill fill) (dir string, led bool, failure *sandbox.ErrorInfo, err error) {
	final := filepath.Join(d.dir, key)
	if isDir(final) {
		return final, false, nil, nil
	}
	d.mu.Lock()
	c, ok := d.inflight[key]
	led = !ok
	if !ok {
		c = &depsCall{done: make(chan struct{})}
		d.inflight[key] = c
		// The install outlives a caller that gives up: others may be
		// waiting for it, and the next run reuses it.
		go func() {
			c.dir, c.failure, c.err = d.install(context.WithoutCancel(ctx), key, what, fill)
			d.mu.Lock()
			delete(d.inflight, key)
			d.mu.Unlock()
			close(c.done)
		}()
	}
	d.mu.Unlock()
	select {
	case <-c.done:
		return c.dir, led, c.failure, c.err
	case <-ctx.Done():
		return "", led, &sandbox.ErrorInfo{Type: sandbox.ErrDependencyError, Message: "the caller went away while the requirements were being installed: " + ctx.Err().Error()}, nil
	}
}

func (d *depsInstaller) install(ctx context.Context, key, what string, fill fill) (string, *sandbox.ErrorInfo, error) {
	final := filepath.Join(d.dir, key)
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return "", nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: creating " + d.dir, Err: err}
	}
	if err := d.check(); err != nil {
		return "", nil, err
	}
	unlock, err := lockFile(ctx, final+".lock")
	if err != nil {
		return "", nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: locking " + final, Err: err}
	}
	defer unlock()
	if isDir(final) { // another process installed it while we waited
		return final, nil, nil
	}
	tmp, err := os.MkdirTemp(d.dir, ".tmp-"+key[:16]+"-")
	if err != nil {
		return "", nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: creating a build directory", Err: err}
	}
	defer os.RemoveAll(tmp) // a no-op once renamed into place
	if failure, err := fill(ctx, tmp, what); failure != nil || err != nil {
		return "", failure, err
	}
	if err := sealDeps(tmp); err != nil {
		return "", nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: preparing " + tmp, Err: err}
	}
	if d.maxBytes > 0 {
		if size := treeSize(tmp); size > d.maxBytes {
			return "", &sandbox.ErrorInfo{Type: sandbox.ErrDependencyError,
				Message: fmt.Sprintf("installing %s: the environment is %d MiB, over the cap of %d MiB (sandbox.deps_max_mb)", what, size>>20, d.maxBytes>>20)}, nil
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: moving the install into place", Err: err}
	}
	return final, nil, nil
}

// runTool runs argv (the runtime's interpreter) like uv: under the
// install timeout, in its own process group, its failure a
// DependencyError with its output.
func (d *depsInstaller) runTool(ctx context.Context, doing string, argv []string) (*sandbox.ErrorInfo, error) {
	_, failure, err := d.runUVOutput(ctx, argv[0], d.dir, doing, argv[1:])
	return failure, err
}

// runUV runs uv with args (argv[1:]) under the install timeout, in its own
// process group. A non-zero exit or the timeout is a DependencyError with
// uv's output (doing names the step); a uv that cannot start is an
// *UnavailableError.
func (d *depsInstaller) runUV(ctx context.Context, uv, doing string, args []string) (*sandbox.ErrorInfo, error) {
	_, failure, err := d.runUVOutput(ctx, uv, d.dir, doing, args)
	return failure, err
}

// runUVOutput is runUV in directory dir, returning uv's stdout.
func (d *depsInstaller) runUVOutput(ctx context.Context, uv, dir, doing string, args []string) (string, *sandbox.ErrorInfo, error) {
	env, err := d.uvEnv()
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	out := &installerOutput{max: maxInstallerOutput}
	var stdout strings.Builder
	cmd := exec.CommandContext(ctx, uv, args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, io.MultiWriter(&stdout, out), out
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
			return "", &sandbox.ErrorInfo{Type: sandbox.ErrDependencyError,
				Message:   fmt.Sprintf("%s timed out after %s", doing, d.timeout),
				Traceback: out.text()}, nil
		case errors.As(runErr, &exitErr):
			return "", &sandbox.ErrorInfo{Type: sandbox.ErrDependencyError,
				Message:   fmt.Sprintf("%s failed (%s exited with status %d)", doing, filepath.Base(uv), exitErr.ExitCode()),
				Traceback: out.text()}, nil
		default:
			return "", nil, &sandbox.UnavailableError{Reason: "running uv " + uv, Hint: uvSetupHint, Err: runErr}
		}
	}
	return stdout.String(), nil, nil
}

// uvEnv is uv's environment: a fixed PATH and HOME, the index variables of
// installerEnv from the gateway's environment, and the configured index
// with its credentials (never on the command line, where other host users
// could read them).
func (d *depsInstaller) uvEnv() ([]string, error) {
	cache := filepath.Join(d.dir, ".cache")
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + cache, "LANG=C.UTF-8"}
	for _, k := range installerEnv {
		if d.index.URL != "" && (k == "UV_DEFAULT_INDEX" || k == "UV_INDEX_URL") {
			continue
		}
		if v := d.getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	if d.index.URL != "" {
		u := d.index.URL
		if d.index.CredentialsFile != "" {
			b, err := os.ReadFile(d.index.CredentialsFile)
			if err != nil {
				return nil, &sandbox.UnavailableError{Reason: "sandbox.package_index.credentials_file", Err: err}
			}
			user, pass, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
			pu, err := url.Parse(u)
			if !ok || err != nil {
				return nil, &sandbox.UnavailableError{Reason: "sandbox.package_index.credentials_file: want one line username:password, and url a URL"}
			}
			pu.User = url.UserPassword(user, pass)
			u = pu.String()
		}
		env = append(env, "UV_DEFAULT_INDEX="+u)
	}
	return env, nil
}

// indexArgs are uv's flags for the configured find-links and --no-index.
func (d *depsInstaller) indexArgs() []string {
	var args []string
	for _, f := range d.index.FindLinks {
		args = append(args, "--find-links", f)
	}
	if d.index.NoIndex {
		args = append(args, "--no-index")
	}
	return args
}

// The download caches, below the deps dir's .cache: uv's own (its
// --cache-dir) and the verified npm tarballs. Each install extracts or
// copies what it needs from them (uv's --link-mode copy), so they only
// save downloads, and the cache cap may empty them (Cache.trimDownloads).
func (d *depsInstaller) uvCacheDir() string  { return filepath.Join(d.dir, ".cache", "uv") }
func (d *depsInstaller) npmCacheDir() string { return filepath.Join(d.dir, ".cache", "npm") }

// treeSize is the bytes of the regular files below root.
func treeSize(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
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
// until ctx ends. The returned function releases it. A lock file removed
// while this waited for it (removeIdleLock) is not the lock any more: it
// opens path again.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if !stillLinked(f, path) {
				f.Close()
				if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
					return nil, err
				}
				continue
			}
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

// stillLinked reports whether path still names the open file f.
func stillLinked(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// removeIdleLock removes the install lock path of directory final when no
// install holds it and final is not installed: under the lock, so an
// install that opened it before the removal sees it unlinked once it gets
// it (lockFile) and takes the new one.
func removeIdleLock(path, final string) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return
	}
	if stillLinked(f, path) && !isDir(final) {
		_ = os.Remove(path)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// uvSetupHint is what an operator does when uv cannot run.
const uvSetupHint = "install uv with scripts/setup.sh (it links .tools/bin/uv), or set sandbox.uv_path / " + sandbox.EnvUV

// installerOutput keeps the first max bytes of uv's output and counts the
// rest, reporting everything as written so uv is never blocked or failed.
type installerOutput struct {
	max   int
	buf   []byte
	total int64
}

func (o *installerOutput) Write(p []byte) (int, error) {
	o.total += int64(len(p))
	if room := o.max - len(o.buf); room > 0 {
		o.buf = append(o.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// text returns what was kept, marking a cut.
func (o *installerOutput) text() string {
	s := string(bytes.TrimSpace(o.buf))
	if cut := o.total - int64(len(o.buf)); cut > 0 {
		s += fmt.Sprintf("\n…[%d more bytes of installer output cut]", cut)
	}
	return s
}
