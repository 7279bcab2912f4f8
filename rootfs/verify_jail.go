package rootfs

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/execgate/execgate/sandbox"
)

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

// verifyJail runs the verification tool through the real sandbox and adds
// the jail checks to r. It returns the *sandbox.UnavailableError when the
// jail could not be created.
func verifyJail(ctx context.Context, r *Report, m *Manifest, cfg sandbox.Config) error {
	// Without the import check: the JavaScript probe imports node:fs to
	// prove that the jail's import map refuses it (the check would refuse
	// the probe before the jail).
	runner, err := sandbox.NewRunner(cfg, sandbox.WithoutImportCheck())
	if err != nil {
		r.add("jailed run", false, err.Error(), unavailableHint(err))
		return err
	}
	defer runner.Close()
	res, err := runner.Run(ctx, sandbox.Spec{
		ExecutionID: "rootfs-verify",
		TenantID:    "execgate",
		Source:      verifyTool,
		Entrypoint:  "run",
		Network:     sandbox.NetworkNone,
		// Importing every extension module and walking the tree takes
		// well under a second; the margins are for a loaded host.
		Limits: sandbox.Limits{TimeoutMS: 30000, CPUMS: 30000, MemoryMB: 256},
	})
	if err != nil {
		r.add("jailed run", false, err.Error(), unavailableHint(err))
		return err
	}
	if res.Status != sandbox.StatusOK {
		detail := "run ended without a result"
		if res.Error != nil {
			detail = res.Error.Type + ": " + res.Error.Message
			if res.Error.Traceback != "" {
				detail += "\n" + tail(res.Error.Traceback, 1500)
			}
		}
		if len(res.NsjailLog) > 0 {
			detail += "\nnsjail: " + tail(strings.Join(res.NsjailLog, "\n"), 1500)
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
	r.add("jailed run", true, fmt.Sprintf("wall %d ms, cpu %d ms", res.Usage.WallMS, res.Usage.CPUMS), "")
	judgeJail(r, m, &f)
	verifyDeno(ctx, r, m, runner)
	return nil
}

// judgeJail turns the jail's facts into checks.
func judgeJail(r *Report, m *Manifest, f *JailFacts) {
	if f.PythonVersion != m.PythonVersion || f.Executable != PythonPath {
		r.add("interpreter in jail", false, fmt.Sprintf("python %s at %s, manifest says %s at %s", f.PythonVersion, f.Executable, m.PythonVersion, PythonPath), "rebuild the rootfs")
	} else {
		r.add("interpreter in jail", true, "python "+f.PythonVersion, "")
	}
	if f.UID != ToolUID || f.GID != ToolGID {
		r.add("identity in jail", false, fmt.Sprintf("uid %d gid %d, want %d/%d", f.UID, f.GID, ToolUID, ToolGID), "the sandbox must map 99999 explicitly")
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
	var ue *sandbox.UnavailableError
	if errors.As(err, &ue) && ue.Hint != "" {
		return ue.Hint
	}
	return "run execgate diagnose"
}
