package rootfs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// hostPython describes the interpreter the rootfs is built from.
type hostPython struct {
	Path       string `json:"-"`          // as configured
	Real       string `json:"executable"` // real path of the binary
	Version    string `json:"version"`    // e.g. 3.11.2
	Short      string `json:"short"`      // e.g. 3.11
	PlatLibDir string `json:"platlibdir"` // e.g. lib
	Stdlib     string `json:"stdlib"`     // host stdlib dir
	Dynload    string `json:"dynload"`    // host lib-dynload dir
	Stamp      string `json:"-"`
}

// jailStdlib is where the stdlib lives inside the jail: next to
// /usr/bin/python3, where the interpreter's prefix search finds it.
func (p *hostPython) jailStdlib() string {
	return "/usr/" + p.PlatLibDir + "/python" + p.Short
}

const probeScript = `
import json, os, platform, sys, sysconfig
dyn = ""
for p in sys.path:
    if os.path.basename(p) == "lib-dynload" and os.path.isdir(p):
        dyn = p
        break
print(json.dumps({
    "executable": os.path.realpath(sys.executable),
    "version": platform.python_version(),
    "short": "%d.%d" % sys.version_info[:2],
    "platlibdir": getattr(sys, "platlibdir", "lib"),
    "stdlib": sysconfig.get_path("stdlib"),
    "dynload": dyn,
}))
`

// probePython runs the interpreter once (isolated, no site) to learn its
// version and layout.
func probePython(ctx context.Context, path string) (*hostPython, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("python path %q: must be absolute", path)
	}
	stamp, err := pythonStamp(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "-I", "-S", "-c", probeScript)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8"}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("probing python %s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	var p hostPython
	if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
		return nil, fmt.Errorf("probing python %s: decoding %q: %w", path, stdout.String(), err)
	}
	p.Path, p.Stamp = path, stamp
	switch {
	case p.Stdlib == "" || !filepath.IsAbs(p.Stdlib):
		return nil, fmt.Errorf("probing python %s: no absolute stdlib path (%q)", path, p.Stdlib)
	case p.Dynload == "":
		return nil, fmt.Errorf("probing python %s: no lib-dynload directory on sys.path", path)
	case strings.ContainsAny(p.PlatLibDir, "/."):
		return nil, fmt.Errorf("probing python %s: odd platlibdir %q", path, p.PlatLibDir)
	}
	return &p, nil
}

// pythonStamp identifies an interpreter binary by real path, size and
// modification time, without running it.
func pythonStamp(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("python %s: not found (set sandbox.python_path; the default is %s)", path, DefaultPython)
	}
	if err != nil {
		return "", fmt.Errorf("resolving python %s: %w", path, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("python %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("python %s: not an executable file", path)
	}
	return fmt.Sprintf("%s size=%d mtime=%d", real, fi.Size(), fi.ModTime().UnixNano()), nil
}
