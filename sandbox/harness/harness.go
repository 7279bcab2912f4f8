// Package harness holds the Python harness that runs a tool inside the jail,
// the execgate_runtime module tools may import, and the JavaScript/TypeScript
// harness with its launcher and import map (execgate_deno.py starts Deno on
// execgate_harness.js; see their headers for that protocol's framing).
//
// The files are embedded in the execgate binary. The rootfs builder installs
// every file of FS under Dir inside the rootfs and records Hash() in the
// rootfs manifest; the sandbox refuses a rootfs whose recorded hash differs,
// so the binary, the protocol and the rootfs cannot drift apart silently.
//
// Protocol (version jaillayout.ProtocolVersion): the harness reads one JSON
// request from stdin until EOF, runs the tool, and writes one JSON envelope
// to file descriptor 3. stdout and stderr belong to the tool.
package harness

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"sort"
	"sync"

	"github.com/execgate/execgate/jaillayout"
)

// FS holds the harness files, at the top level (no directories).
//
//go:embed harness.py execgate_harness.py execgate_runtime.py execgate_zygote.py execgate_deno.py execgate_harness.js import_map.json
var FS embed.FS

// Dir is where the rootfs installs FS, as seen from inside the jail.
const Dir = jaillayout.HarnessDir

// Entry is the harness script inside Dir.
const Entry = "harness.py"

// JSEntry is the JavaScript and TypeScript harness inside Dir (Deno's main
// module), ImportMap the import map Deno is started with.
const (
	JSEntry   = "execgate_harness.js"
	ImportMap = "import_map.json"
)

// DenoEntry is the launcher of mode validate inside Dir (run by the jail's
// python3; it runs `deno check` on the source).
const DenoEntry = "execgate_deno.py"

// ZygoteEntry is the zygote of isolation level process inside Dir
// (package sandbox/zygote).
const ZygoteEntry = "execgate_zygote.py"

var hashOnce = sync.OnceValue(func() string {
	sum, err := hashFS(FS)
	if err != nil {
		// FS is embedded at build time; failing to read it is a build bug.
		panic("harness: hashing embedded files: " + err.Error())
	}
	return sum
})

// Hash returns the hex SHA-256 over the harness files: for each file in
// name order, its name, a NUL byte, its content and a NUL byte.
func Hash() string { return hashOnce() }

// Files returns the names of the harness files in name order.
func Files() []string {
	names, err := fileNames(FS)
	if err != nil {
		panic("harness: listing embedded files: " + err.Error())
	}
	return names
}

func fileNames(fsys fs.FS) ([]string, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

func hashFS(fsys fs.FS) (string, error) {
	names, err := fileNames(fsys)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return "", err
		}
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(data)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
