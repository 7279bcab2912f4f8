// Package hostbin finds the host binaries execgate runs or copies (nsjail,
// uv, deno): a configured path, an environment variable, the .tools/bin
// link scripts/setup.sh makes, then $PATH. It imports nothing of
// execgate's, so the sandbox (which runs nsjail and uv) and the rootfs
// builder (which copies deno into the tree) share one lookup.
package hostbin

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tool is a binary execgate finds on the host.
type Tool struct {
	Name   string // on $PATH
	Key    string // config key naming it
	Env    string // override variable
	Link   string // relative to the repository (or install) root
	Hint   string // what the operator can do when it is missing
	Reason string // what is missing, for the error
}

// EnvDeno names the environment variable that points at the host's Deno
// binary (the one the rootfs builder copies into the tree).
const EnvDeno = "EXECGATE_DENO"

// Deno is the JavaScript/TypeScript runtime the rootfs builder copies into
// the tree. execgate never runs it on the host.
var Deno = Tool{
	Name:   "deno",
	Key:    "rootfs deno path",
	Env:    EnvDeno,
	Link:   ".tools/bin/deno",
	Hint:   "install Deno with scripts/setup.sh (it links .tools/bin/deno from the pinned deno wheel), or set " + EnvDeno,
	Reason: "deno (the JavaScript/TypeScript runtime) not found",
}

// Error says why a tool was not found or is not usable.
type Error struct {
	Reason string   // one line: what failed
	Looked []string // where the lookup looked, when it found nothing
	Hint   string
	Err    error // fs.ErrNotExist when nothing was found
}

func (e *Error) Error() string {
	msg := e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Find locates t: configured, then $t.Env, then t.Link beside the
// executable's parent directory (<root>/bin/execgate → <root>/<link>) or in
// the working directory or one of its parents, then $PATH. An explicitly
// configured path that is not an executable file is an error, not a reason
// to look elsewhere. Errors are *Error.
func Find(t Tool, configured string) (string, error) {
	return Lookup{Getenv: os.Getenv, Executable: os.Executable, Getwd: os.Getwd, LookPath: exec.LookPath}.Find(t, configured)
}

// Lookup is the host Find looks at; tests replace its functions.
type Lookup struct {
	Getenv     func(string) string
	Executable func() (string, error)
	Getwd      func() (string, error)
	LookPath   func(string) (string, error)
}

// Find is the package's Find against l.
func (l Lookup) Find(t Tool, configured string) (string, error) {
	explicit := func(p, source string) (string, error) {
		if err := checkExecutable(p); err != nil {
			return "", &Error{Reason: fmt.Sprintf("%s from %s (%s) is not usable", t.Name, source, p), Hint: t.Hint, Err: err}
		}
		return filepath.Abs(p)
	}
	if configured != "" {
		return explicit(configured, t.Key)
	}
	if p := l.Getenv(t.Env); p != "" {
		return explicit(p, t.Env)
	}
	var looked []string
	seen := map[string]bool{}
	try := func(p string) bool {
		if seen[p] {
			return false
		}
		seen[p] = true
		looked = append(looked, p)
		return checkExecutable(p) == nil
	}
	if exe, err := l.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		if p := filepath.Join(filepath.Dir(filepath.Dir(exe)), t.Link); try(p) {
			return p, nil
		}
	}
	if wd, err := l.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, t.Link); try(p) {
				return p, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if p, err := l.LookPath(t.Name); err == nil {
		return filepath.Abs(p)
	}
	looked = append(looked, "$PATH")
	return "", &Error{Reason: t.Reason, Looked: looked, Hint: t.Hint, Err: fs.ErrNotExist}
}

// LookedLine renders e.Looked as one log line ("" when it is empty).
func (e *Error) LookedLine() string {
	if len(e.Looked) == 0 {
		return ""
	}
	return "looked in: " + strings.Join(e.Looked, ", ")
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: not executable", p)
	}
	return nil
}
