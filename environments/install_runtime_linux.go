package environments

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/execgate/execgate/internal/atomicfile"
	"github.com/execgate/execgate/jaillayout"
)

// Package installs for a runtime built from packages (rootfs's runtimes):
// its interpreter needs the tree's own C library, which may be newer than
// the host's, so it cannot run as it is on the host. uv is given a
// launcher script (in the deps dir, outside any tree) that starts it
// through the tree's loader and libraries (Manifest.HostPython); the
// installed packages' bytecode is compiled by the same interpreter in one
// process (compileall's workers would start sys.executable without the
// loader); and the wheels are chosen for the tree's platform
// (Manifest.Platform, from its C library), unless sandbox.python_platform
// names one. Nothing of the tree runs inside a jail here: uv reads the
// interpreter's tags and compileall compiles files, as the host
// interpreter did for the host runtime.

// forRuntime sets d up for the runtime of the rootfs at dir (manifest m).
// The host runtime needs nothing: its interpreter is the host's.
func (d *depsInstaller) forRuntime(dir string, m *jaillayout.Manifest) error {
	if m.Loader == "" {
		return nil
	}
	argv := m.HostPython(dir)
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# execgate: the interpreter of runtime " + m.Runtime + " (" + dir + ") through its own loader\nexec")
	for _, a := range argv {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString(" \"$@\"\n")
	sum := sha256.Sum256([]byte(b.String()))
	launcher := filepath.Join(d.dir, ".python", m.Runtime+"-"+hex.EncodeToString(sum[:6]), "python3")
	if data, err := os.ReadFile(launcher); err != nil || string(data) != b.String() {
		if err := os.MkdirAll(filepath.Dir(launcher), 0o755); err != nil {
			return fmt.Errorf("sandbox.deps_dir: %w", err)
		}
		if err := atomicfile.Write(launcher, []byte(b.String()), 0o755); err != nil {
			return fmt.Errorf("sandbox.deps_dir: writing %s: %w", launcher, err)
		}
	}
	d.python, d.compile = launcher, argv
	return nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
