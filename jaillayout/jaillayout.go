// Package jaillayout is the one description of the jail's file system and
// identity: what is where inside the jail, who the tool runs as, where the
// rootfs keeps its manifest and what the manifest holds, and which protocol
// the harness speaks. The rootfs builder (package rootfs) puts things at
// these paths; the sandbox binds, mounts and runs them there. It imports
// nothing of execgate's, so both may import it.
//
// How to add a path:
//  1. Declare it here with a comment saying what lives there and who
//     creates it (the builder, or the sandbox at run time).
//  2. If the sandbox mounts over it, add it to MountPoints so the builder
//     creates the mount point.
//  3. If the builder's tree changes, bump Version so old trees are rebuilt.
package jaillayout

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// ProtocolVersion is the version of the gateway↔harness protocol. The harness
// refuses a request with another version and the runner refuses a result with
// another version, so the binary and the rootfs can never drift apart
// silently. The harness files declare it again (PROTOCOL_VERSION); a test in
// package harness fails when they disagree.
const ProtocolVersion = 1

// Identity inside the jail. The sandbox maps these ids to the jail's own
// host uid/gid from sandbox.uid_range (never to host root); the builder
// writes them to /etc/passwd and /etc/group.
const (
	ToolUID = 99999
	ToolGID = 99999
)

// DenoV8Flags are the V8 flags every Deno in a jail starts with beside its
// heap limit (--max-old-space-size, which V8's code cache check ignores):
// no code generation from strings (eval, new Function). The rootfs builds
// Deno's code cache with the same flags: V8 rejects a cache made under
// other ones.
const DenoV8Flags = "--disallow-code-generation-from-strings"

// Paths inside the jail (absolute, as seen from inside it).
const (
	// PythonPath is the interpreter (a copy of the host's, mode 0711).
	PythonPath = "/usr/bin/python3"
	// DenoPath is the Deno binary (JavaScript and TypeScript), when the
	// rootfs was built with one.
	DenoPath = "/usr/bin/deno"
	// DenoDir is Deno's cache directory (DENO_DIR), read-only: the
	// rootfs build fills it once with V8's code cache of the harness
	// (Manifest.DenoCodeCache); --cached-only never adds to it.
	DenoDir = "/opt/execgate/deno-cache"
	// HarnessDir holds the harness files (package sandbox/harness).
	HarnessDir = "/opt/execgate/harness"
	// DepsDir is the empty mount point over which a run's package
	// environment (or pinned requirement set) is bound read-only.
	DepsDir = "/opt/execgate/deps"
	// DepsImportMap and DepsDenoDir are what a JavaScript package
	// environment (package environments/npm) holds below DepsDir: the
	// import map Deno is started with (the harness's blocked specifiers
	// and the environment's packages) and the Deno cache directory its npm
	// packages are read from (DENO_DIR).
	DepsImportMap = DepsDir + "/import_map.json"
	DepsDenoDir   = DepsDir + "/deno"
	// EgressDir is the empty mount point over which a proxy-mode jail gets
	// its own host directory, read-only; the egress proxy's unix socket for
	// the run appears in it as EgressSocket.
	EgressDir    = "/opt/execgate/egress"
	EgressSocket = EgressDir + "/" + EgressSocketName
	// ManifestPath is where the rootfs keeps its Manifest.
	ManifestPath = "/etc/execgate/manifest.json"
	// TmpDir is the jail's writable tmpfs (Limits.TmpMB), its working
	// directory and the tool's HOME.
	TmpDir = "/tmp"
	// SecretsDir is where a run finds its brokered secrets, one file per
	// name (mode 0400, the tool's own), on a tmpfs of the run's own the
	// sandbox mounts (SecretsTmpfsBytes; at level process each run mounts
	// a fresh one in its own mount namespace); the harness writes them
	// from its request before the tool is loaded. Never on the host's
	// disk, never in a shared directory.
	SecretsDir = "/run/execgate/secrets"
	// WorkspaceDir is the tool's working directory: the run's input
	// files, read-only, over which the sandbox mounts the run's own tmpfs
	// (package sandbox/workspace); WorkspaceOutDir, in it, is the tool's
	// writable tmpfs whose files the runner collects as artifacts.
	WorkspaceDir    = "/workspace"
	WorkspaceOutDir = WorkspaceDir + "/out"
	// DevDir, DevShmDir and ProcDir are mounted by the sandbox.
	DevDir    = "/dev"
	DevShmDir = "/dev/shm"
	ProcDir   = "/proc"
	// ZoneinfoDir is the host's time zone database, dereferenced.
	ZoneinfoDir = "/usr/share/zoneinfo"
	// CABundlePath and CADir are the trust store at Debian's paths.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	CADir        = "/etc/ssl/certs"
	// OpenSSLDir is OpenSSL's OPENSSLDIR on Debian; cert.pem and certs/
	// below it are the library's built-in defaults.
	OpenSSLDir = "/usr/lib/ssl"
	// ResolvConf and Hosts are written by the builder; the sandbox binds
	// the host's over them in network modes that resolve names.
	ResolvConf = "/etc/resolv.conf"
	Hosts      = "/etc/hosts"
)

// EgressSocketName is the egress socket's name inside EgressDir.
const EgressSocketName = "proxy.sock"

// Devices are the host devices the sandbox binds into the jail's /dev; the
// builder leaves empty files at these paths to bind over.
var Devices = []string{"/dev/null", "/dev/zero", "/dev/urandom"}

// MountPoints are the directories the sandbox mounts or binds over; the
// builder creates them empty so nsjail never creates a mount point inside
// the (host-backed, read-only) tree.
var MountPoints = []string{TmpDir, DevDir, DevShmDir, ProcDir, DepsDir, EgressDir, HarnessDir, WorkspaceDir, SecretsDir, path.Dir(ManifestPath)}

// SecretsTmpfsBytes sizes the tmpfs at SecretsDir: a run's secrets at
// their bounds (16 of 4 KiB, a page each) with room to spare.
const SecretsTmpfsBytes = 256 << 10

// ManifestFormat is the version of the manifest's own layout.
const ManifestFormat = 1

// Version is the version of the tree's layout: what the builder puts where.
// Bump it whenever the builder changes what a tree holds, so trees an older
// execgate built are rebuilt.
//
//	1 (or absent): the original tree
//	2: /usr/share/zoneinfo, /opt/execgate/egress, an interpreter not
//	   readable by the tool's user
//	3: /workspace, /run/execgate/secrets (brokered secrets' mount point)
//	4: the system libraries manylinux wheels link (libstdc++, libpthread, …)
//	5: runtimes: trees built from pinned Debian packages (merged /usr),
//	   the manifest names its runtime; every runtime's closure holds the
//	   packages of 4's libraries
const Version = 5

// Manifest describes a built rootfs. It lives at ManifestPath inside the tree.
type Manifest struct {
	Format int `json:"format"`
	// Layout is the Version the tree was built with.
	Layout          int    `json:"layout"`
	ProtocolVersion int    `json:"protocol_version"`
	HarnessSHA256   string `json:"harness_sha256"`
	PythonVersion   string `json:"python_version"`
	// PythonPath is the host interpreter the tree was built from.
	PythonPath string `json:"python_path"`
	// PythonStamp identifies the host interpreter binary (real path, size,
	// modification time) so a stale tree is noticed without running it.
	PythonStamp string `json:"python_stamp"`
	// Stdlib is the standard library directory inside the jail.
	Stdlib string `json:"stdlib"`
	// Files and Bytes count the regular files (manifest excluded).
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// CACerts is the number of certificates in the installed bundle.
	CACerts int `json:"ca_certs"`
	// ContentSHA256 hashes every path, type, mode, link target and file
	// content in the tree except the manifest itself.
	ContentSHA256 string    `json:"content_sha256"`
	BuiltAt       time.Time `json:"built_at"`
	// DenoVersion and DenoStamp describe the Deno binary in the tree
	// (JavaScript and TypeScript tools); empty when built without one.
	// DenoStamp is its content's identity (rootfs.DenoStamp), not its path.
	DenoVersion string `json:"deno_version,omitempty"`
	DenoStamp   string `json:"deno_stamp,omitempty"`
	// DenoCodeCache says what the build left in DenoDir: "harness" (V8's
	// code cache of the harness and the runtime modules a run loads, made
	// by running the harness in the tree and checked to be used from a
	// read-only directory), or why the directory is empty ("none: ...").
	// Empty: built before the cache existed (or without Deno).
	DenoCodeCache string `json:"deno_code_cache,omitempty"`

	// Runtime is the name runs choose the tree by: a runtime built from
	// pinned Debian packages ("python3.11", "python3.13") or "host" (copied
	// from the host's interpreter, PythonPath).
	Runtime string `json:"runtime"`
	// Distribution says where the packages came from ("debian bookworm");
	// empty for the host runtime.
	Distribution string `json:"distribution,omitempty"`
	// Packages are the pinned packages the tree was unpacked from.
	Packages []Package `json:"packages,omitempty"`
	// LockSHA256 hashes the runtime's entry of the lock it was built from:
	// a tree built from another lock is rebuilt.
	LockSHA256 string `json:"lock_sha256,omitempty"`
	// Glibc is the tree's C library version ("2.36"); Platform uv's
	// --python-platform for wheels that fit it ("x86_64-manylinux_2_36").
	// Empty for the host runtime (the sandbox's default platform).
	Glibc    string `json:"glibc,omitempty"`
	Platform string `json:"platform,omitempty"`
	// Loader and LibraryPath start the tree's interpreter on the host,
	// outside any jail, for the work that needs the interpreter and is not
	// a run: compiling the standard library and installing packages. Loader
	// is the tree's dynamic loader and LibraryPath its library directories
	// (paths in the tree). An empty Loader: the tree's interpreter is the
	// host's (PythonPath), run as it is.
	Loader      string   `json:"loader,omitempty"`
	LibraryPath []string `json:"library_path,omitempty"`
}

// Package is one package a tree was built from.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
}

// HostPython is the command that runs the interpreter of the tree at dir
// (a host path) on the host: the host interpreter itself for a tree
// copied from it, else the tree's interpreter through the tree's own
// loader and libraries (the host's C library may be older than the one
// the interpreter needs). Only the work that needs an interpreter and is
// not a run uses it (compiling, installing packages): runs always start
// in a jail.
func (m *Manifest) HostPython(dir string) []string {
	if m.Loader == "" {
		return []string{m.PythonPath}
	}
	libs := make([]string, len(m.LibraryPath))
	for i, l := range m.LibraryPath {
		libs[i] = filepath.Join(dir, l)
	}
	return []string{filepath.Join(dir, m.Loader), "--library-path", strings.Join(libs, ":"), filepath.Join(dir, PythonPath)}
}

// ErrNoManifest means the directory holds no rootfs manifest.
var ErrNoManifest = errors.New("no rootfs manifest")

// ReadManifest reads the manifest of the rootfs at dir (a host path). A
// missing manifest is ErrNoManifest; a manifest of another Format is an
// error.
func ReadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestPath)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading manifest in %s: %w", dir, ErrNoManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decoding manifest %s: %w", p, err)
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("manifest %s: format %d, want %d", p, m.Format, ManifestFormat)
	}
	return &m, nil
}
