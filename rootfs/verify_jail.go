package rootfs

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/execgate/execgate/jaillayout"
)

// Jail runs Verify's probes in real jails on the rootfs being verified. The
// sandbox provides it (package rootfs/jailverify), so that building and
// checking a tree does not depend on the sandbox.
type Jail interface {
	// Probe runs p. A non-nil error means no jail could be created; it may
	// be a *JailError carrying the operator's hint.
	Probe(ctx context.Context, p Probe) (*ProbeResult, error)
	Close() error
}

// OpenJail opens a Jail on the rootfs at dir. An error means no jail can
// be created there (it may be a *JailError).
type OpenJail func(dir string) (Jail, error)

// Probe is one program Verify runs in a jail: a tool with entrypoint run,
// no arguments, no network, and limits generous enough for a loaded host.
type Probe struct {
	// ID names the run (its execution id).
	ID string
	// Language is "python" or "javascript".
	Language string
	Source   string
}

// ProbeResult is what happened to a Probe that ran.
type ProbeResult struct {
	// OK says the probe returned; Result is its JSON value.
	OK     bool
	Result json.RawMessage
	// ErrorType, ErrorMessage and Traceback describe a run that ended in
	// error (the sandbox's outcome type).
	ErrorType    string
	ErrorMessage string
	Traceback    string
	Stderr       string
	// JailLog is nsjail's own log of the run.
	JailLog []string
	WallMS  int64
	CPUMS   int64
}

// JailError is a jail that could not be created, with what the operator
// can do about it.
type JailError struct {
	Err  error
	Hint string
}

func (e *JailError) Error() string { return e.Err.Error() }
func (e *JailError) Unwrap() error { return e.Err }

// verifyTool is the tool Verify runs in the jail (see verify_tool.py).
//
//go:embed verify_tool.py
var verifyTool string

// JailFacts is what the verification tool saw inside the jail.
type JailFacts struct {
	PythonVersion  string            `json:"python_version"`
	Executable     string            `json:"executable"`
	UID            int               `json:"uid"`
	GID            int               `json:"gid"`
	CAFile         string            `json:"ca_file"`
	CACerts        int               `json:"ca_certs"`
	Modules        int               `json:"modules"`
	ImportErrors   map[string]string `json:"import_errors"`
	NotPrecompiled []string          `json:"not_precompiled"`
	Setid          []string          `json:"setid"`
}

// verifyJail runs the verification tool in a jail opened by open and adds
// the jail checks to r. It returns open's or the probe's error when the
// jail could not be created.
func verifyJail(ctx context.Context, r *Report, m *Manifest, open OpenJail) error {
	jail, err := open(r.Dir)
	if err != nil {
		r.add("jailed run", false, err.Error(), unavailableHint(err))
		return err
	}
	defer jail.Close()
	res, err := jail.Probe(ctx, Probe{ID: "rootfs-verify", Language: "python", Source: verifyTool})
	if err != nil {
		r.add("jailed run", false, err.Error(), unavailableHint(err))
		return err
	}
	if !res.OK {
		detail := "run ended without a result"
		if res.ErrorType != "" {
			detail = res.ErrorType + ": " + res.ErrorMessage
			if res.Traceback != "" {
				detail += "\n" + tail(res.Traceback, 1500)
			}
		}
		if len(res.JailLog) > 0 {
			detail += "\nnsjail: " + tail(strings.Join(res.JailLog, "\n"), 1500)
		}
		r.add("jailed run", false, detail, "the interpreter does not start in the jail; rebuild the rootfs, then run execgate diagnose")
		return nil
	}
	var f JailFacts
	if err := json.Unmarshal(res.Result, &f); err != nil {
		r.add("jailed run", false, fmt.Sprintf("decoding the tool's result %q: %v", tail(string(res.Result), 200), err), "")
		return nil
	}
	r.Jail = &f
	r.add("jailed run", true, fmt.Sprintf("wall %d ms, cpu %d ms", res.WallMS, res.CPUMS), "")
	judgeJail(r, m, &f)
	verifyDeno(ctx, r, m, jail)
	return nil
}

// judgeJail turns the jail's facts into checks.
func judgeJail(r *Report, m *Manifest, f *JailFacts) {
	if f.PythonVersion != m.PythonVersion || f.Executable != jaillayout.PythonPath {
		r.add("interpreter in jail", false, fmt.Sprintf("python %s at %s, manifest says %s at %s", f.PythonVersion, f.Executable, m.PythonVersion, jaillayout.PythonPath), "rebuild the rootfs")
	} else {
		r.add("interpreter in jail", true, "python "+f.PythonVersion, "")
	}
	if f.UID != jaillayout.ToolUID || f.GID != jaillayout.ToolGID {
		r.add("identity in jail", false, fmt.Sprintf("uid %d gid %d, want %d/%d", f.UID, f.GID, jaillayout.ToolUID, jaillayout.ToolGID), "the sandbox must map 99999 explicitly")
	} else {
		r.add("identity in jail", true, fmt.Sprintf("uid %d gid %d", f.UID, f.GID), "")
	}
	if f.CACerts == 0 {
		r.add("CA certificates in jail", false, fmt.Sprintf("ssl.create_default_context() loaded none (cafile %q)", f.CAFile), "the trust store is missing from the rootfs; rebuild it")
	} else {
		r.add("CA certificates in jail", true, fmt.Sprintf("%d (cafile %s)", f.CACerts, f.CAFile), "")
	}
	if len(f.ImportErrors) > 0 {
		names := make([]string, 0, len(f.ImportErrors))
		for n, e := range f.ImportErrors {
			names = append(names, n+" ("+e+")")
		}
		sort.Strings(names)
		r.add("imports in jail", false, strings.Join(names, "; "), "a shared library is missing from the closure; rebuild and report the module")
	} else {
		r.add("imports in jail", true, fmt.Sprintf("%d modules incl. json, asyncio, ssl, ctypes", f.Modules), "")
	}
	if len(f.NotPrecompiled) > 0 {
		r.add("precompiled stdlib", false, fmt.Sprintf("%d modules without .pyc, e.g. %s", len(f.NotPrecompiled), f.NotPrecompiled[0]), "rebuild the rootfs (compileall step)")
	} else {
		r.add("precompiled stdlib", true, "every imported module has its .pyc", "")
	}
	if len(f.Setid) > 0 {
		r.add("setuid/setgid in jail", false, strings.Join(f.Setid, ", "), "remove setuid/setgid files from the rootfs")
	} else {
		r.add("setuid/setgid in jail", true, "none visible", "")
	}
}

// unavailableHint returns the sandbox's own hint for a jail that could not
// be created.
func unavailableHint(err error) string {
	var je *JailError
	if errors.As(err, &je) && je.Hint != "" {
		return je.Hint
	}
	return "run execgate diagnose"
}
