// Package runtimes serves the Python runtimes a process runs side by side
// (issue #25): each runtime is a rootfs of its own (package rootfs builds
// python3.11 and python3.13 from pinned Debian packages, and the host
// fallback), with a sandbox.Runner of its own (its warm pool and its
// zygotes for level process) and package environments of its own
// (resolved for its Python and its C library's platform). A Set routes a
// run to the runtime it was decided for and says what ran it; it lists
// what each runtime is (GET /v1/runtimes).
//
// JavaScript and TypeScript runs choose by language: they go to the first
// runtime whose rootfs carries Deno (every runtime built on a host with
// Deno carries it), the first of sandbox.runtimes by default.
package runtimes

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox"
)

// Runtime is one runtime of a Set: its rootfs and what serves it. A
// runtime whose runner could not be made keeps its error (Err) and its
// environments when it has a rootfs: runs asking for it are refused with
// that error.
type Runtime struct {
	Name     string
	Dir      string
	Manifest *jaillayout.Manifest
	Runner   *sandbox.Runner     // nil when Err is set
	Envs     *environments.Cache // nil when the rootfs is unreadable
	Err      error
}

// Set is the runtimes of one process, in the order of sandbox.runtimes
// (the first is the default for a Python run that names none and for
// callers that skip the policy). Create it with New; Close closes every
// runner. It is safe for concurrent use (it does not change after New).
type Set struct {
	order []*Runtime
	by    map[string]*Runtime
}

// New makes a Set of rts (at least one; names unique).
func New(rts ...*Runtime) (*Set, error) {
	if len(rts) == 0 {
		return nil, errors.New("runtimes: no runtime")
	}
	s := &Set{by: map[string]*Runtime{}}
	for _, rt := range rts {
		if _, dup := s.by[rt.Name]; dup {
			return nil, fmt.Errorf("runtimes: %s twice", rt.Name)
		}
		if rt.Runner == nil && rt.Err == nil {
			return nil, fmt.Errorf("runtimes: %s has neither a runner nor an error", rt.Name)
		}
		s.by[rt.Name] = rt
		s.order = append(s.order, rt)
	}
	return s, nil
}

// Names are the runtimes of the Set, in order.
func (s *Set) Names() []string {
	out := make([]string, len(s.order))
	for i, rt := range s.order {
		out[i] = rt.Name
	}
	return out
}

// Get returns the runtime called name.
func (s *Set) Get(name string) (*Runtime, bool) {
	rt, ok := s.by[name]
	return rt, ok
}

// Default is the first runtime.
func (s *Set) Default() *Runtime { return s.order[0] }

// Usable reports whether at least one runtime has a runner.
func (s *Set) Usable() bool {
	for _, rt := range s.order {
		if rt.Runner != nil {
			return true
		}
	}
	return false
}

// Failed are the runtimes without a runner, with why.
func (s *Set) Failed() map[string]error {
	out := map[string]error{}
	for _, rt := range s.order {
		if rt.Err != nil {
			out[rt.Name] = rt.Err
		}
	}
	return out
}

// ErrNotServed is wrapped (in an *sandbox.UnavailableError) when a run
// asks for a runtime this process does not serve.
var ErrNotServed = errors.New("runtime not served")

// DenoRuntime is what ran a JavaScript or TypeScript run (Usage.Runtime).
const DenoRuntime = "deno"

// route is the runtime that runs spec: a Python run's own (its Runtime,
// or the default when it names none), or for JavaScript and TypeScript
// the first runtime with Deno in its rootfs (the first runtime when none
// has: its runner says Deno is missing).
func (s *Set) route(spec sandbox.Spec) (*Runtime, error) {
	if spec.Language != "" && spec.Language != sandbox.LanguagePython {
		for _, rt := range s.order {
			if rt.Runner != nil && rt.Manifest != nil && rt.Manifest.DenoVersion != "" {
				return rt, nil
			}
		}
		return s.order[0], nil
	}
	if spec.Runtime == "" {
		return s.order[0], nil
	}
	rt, ok := s.by[spec.Runtime]
	if !ok {
		return nil, &sandbox.UnavailableError{
			Reason: fmt.Sprintf("runtime %q is not served here (it serves %s)", spec.Runtime, strings.Join(s.Names(), ", ")),
			Hint:   "list it in sandbox.runtimes (its rootfs is built on first use), or ask for one of these",
			Err:    ErrNotServed,
		}
	}
	return rt, nil
}

// runner is rt's runner, or its error as the UnavailableError a run gets.
func (rt *Runtime) runner() (*sandbox.Runner, error) {
	if rt.Runner != nil {
		return rt.Runner, nil
	}
	var ue *sandbox.UnavailableError
	if errors.As(rt.Err, &ue) {
		return nil, &sandbox.UnavailableError{Reason: "runtime " + rt.Name + ": " + ue.Reason, Log: ue.Log, Hint: ue.Hint, Err: ue.Err}
	}
	return nil, &sandbox.UnavailableError{Reason: "runtime " + rt.Name + " is unavailable", Err: rt.Err}
}

// Run runs spec on its runtime (route) and says in Usage.Runtime what ran
// it. A run that carries a lock and no environment (an executor's: the
// gateway resolved it) has it installed first in its runtime's
// environments (environments.Cache.Installing). A runtime this process
// does not serve, or whose runner could not be made, is an
// *sandbox.UnavailableError naming it: nothing ran.
func (s *Set) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	rt, err := s.route(spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	r, err := rt.runner()
	if err != nil {
		return sandbox.Result{}, err
	}
	var run environments.Runner = r
	if rt.Envs != nil {
		run = rt.Envs.Installing(r)
	}
	res, err := run.Run(ctx, spec)
	if err == nil && res.Usage.Isolation != "" { // something ran
		res.Usage.Runtime = rt.Name
		if spec.Language != "" && spec.Language != sandbox.LanguagePython {
			res.Usage.Runtime = DenoRuntime
		}
	}
	return res, err
}

// Warm keeps n warm jails for spec's profile on its runtime
// (sandbox.Runner.Warm).
func (s *Set) Warm(ctx context.Context, spec sandbox.Spec, n int) (int, error) {
	rt, err := s.route(spec)
	if err != nil {
		return 0, err
	}
	r, err := rt.runner()
	if err != nil {
		return 0, err
	}
	return r.Warm(ctx, spec, n)
}

// WarmIdle is how many warm jails wait now, every runtime together.
func (s *Set) WarmIdle() int {
	n := 0
	for _, rt := range s.order {
		if rt.Runner != nil {
			n += rt.Runner.Info().WarmIdle
		}
	}
	return n
}

// Environments returns the package environments of the runs of language
// on the runtime called name: a Python run's runtime's (name "": the
// first), or for JavaScript and TypeScript (npm packages; name is
// ignored) those of the runtime that runs them (route), so the packages
// are installed where the run's runner binds them. A runtime not served,
// or without a readable rootfs, is an *sandbox.UnavailableError naming
// it.
func (s *Set) Environments(language, name string) (*environments.Cache, error) {
	rt, err := s.route(sandbox.Spec{Language: language, Runtime: name})
	if err != nil {
		return nil, err
	}
	if rt.Envs == nil {
		_, err := rt.runner()
		if err == nil {
			err = &sandbox.UnavailableError{Reason: "runtime " + rt.Name + " has no package environments"}
		}
		return nil, err
	}
	return rt.Envs, nil
}

// Close closes every runner.
func (s *Set) Close() error {
	var errs []error
	for _, rt := range s.order {
		if rt.Runner != nil {
			errs = append(errs, rt.Runner.Close())
		}
	}
	return errors.Join(errs...)
}

// Info describes one runtime for GET /v1/runtimes: what it is and what it
// has.
type Info struct {
	Name string `json:"name"`
	// PythonVersion is the interpreter's version ("3.13.5").
	PythonVersion string `json:"python_version"`
	// Distribution says where its packages came from ("debian trixie");
	// "host" for the runtime copied from the host's interpreter.
	Distribution string `json:"distribution"`
	// Glibc is its C library's version; Platform the wheels'
	// platform its requirements resolve for.
	Glibc    string `json:"glibc,omitempty"`
	Platform string `json:"platform,omitempty"`
	// CACerts is the number of certificates in its trust store.
	CACerts int `json:"ca_certs"`
	// Deno is the Deno version in its rootfs ("" without: no JavaScript).
	Deno string `json:"deno,omitempty"`
	// Packages are the Debian packages it was built from.
	Packages []Package `json:"packages"`
	// Available is false when it cannot run now (Error says why).
	Available bool   `json:"available"`
	Error     string `json:"error,omitempty"`
}

// Package is one package a runtime was built from.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// InfoOf describes a runtime from its manifest (nil: only its name).
func InfoOf(name string, m *jaillayout.Manifest) Info {
	in := Info{Name: name, Packages: []Package{}}
	if m == nil {
		return in
	}
	in.PythonVersion, in.Distribution, in.Glibc, in.Platform = m.PythonVersion, m.Distribution, m.Glibc, m.Platform
	in.CACerts, in.Deno = m.CACerts, m.DenoVersion
	if in.Distribution == "" {
		in.Distribution = "host"
	}
	for _, p := range m.Packages {
		in.Packages = append(in.Packages, Package{Name: p.Name, Version: p.Version})
	}
	sort.Slice(in.Packages, func(i, j int) bool { return in.Packages[i].Name < in.Packages[j].Name })
	return in
}

// Runtimes describes every runtime of the Set, in order.
func (s *Set) Runtimes(context.Context) ([]Info, error) {
	out := make([]Info, 0, len(s.order))
	for _, rt := range s.order {
		in := InfoOf(rt.Name, rt.Manifest)
		in.Available = rt.Runner != nil
		if rt.Err != nil {
			in.Error = rt.Err.Error()
		}
		out = append(out, in)
	}
	return out, nil
}
