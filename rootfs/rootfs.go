// Package rootfs builds and verifies the minimal root filesystem the jail runs in.
//
// A tree is a runtime (lock.go): built from the pinned Debian packages of
// runtimes.lock.json (python3.11 from bookworm, python3.13 from trixie),
// unpacked into a merged-/usr source directory, or, for the host fallback,
// from the host's Python interpreter (default /usr/bin/python3). Either way
// it holds: the interpreter itself, its standard library without test
// suites, GUI and packaging leftovers, pre-compiled to .pyc (by the tree's
// own interpreter) so a read-only jail starts fast; the shared-library
// closure of the interpreter and of every extension module (found by
// reading the ELF dynamic sections, placed at the source's paths with its
// symlinks reproduced as relative links); a CA trust store at OpenSSL's
// default paths with every symlink dereferenced; a minimal /etc; empty
// mount points; the Python harness; Deno (when the host has it); and a
// manifest.
//
// Layout (package jaillayout names every path; the sandbox relies on it):
//
//	/usr/bin/python3                     the runtime's interpreter (symlinks followed)
//	/usr/lib/python3.X                   standard library (+ lib-dynload), compiled
//	/lib/x86_64-linux-gnu/…, /lib64/…    shared libraries at their source paths
//	                                     (a runtime from packages: merged /usr)
//	/etc/passwd, /etc/group              root, tool (99999) and nobody
//	/etc/nsswitch.conf, hosts, resolv.conf
//	/etc/ssl/certs/ca-certificates.crt   CA bundle (and hashed certs beside it)
//	/usr/lib/ssl/cert.pem, /usr/lib/ssl/certs   the same, at OpenSSL's OPENSSLDIR
//	/usr/share/zoneinfo                  the time zone database (tzdata, or the
//	                                     host's), dereferenced
//	/tmp, /dev, /dev/shm, /proc, /opt/execgate/deps, /opt/execgate/egress,
//	/workspace                           empty mount points
//	/dev/null, /dev/zero, /dev/urandom  empty files the sandbox binds devices over
//	/opt/execgate/harness/               the harness (sandbox/harness.FS)
//	/etc/execgate/manifest.json          the Manifest
//
// Every file is owned by root (when built as root), readable by all and
// writable by nobody but the owner; no file carries a setuid or setgid bit.
// The one exception to "readable by all" is the interpreter, mode 0711:
// executable but not readable by the tool's user, which makes the kernel
// start every process of the jail non-dumpable, so no process can read
// another's memory through /proc/<pid>/mem (CONTAINMENT item 9).
//
// Build replaces a rootfs atomically (the new tree is built beside the old
// one and swapped in with one rename); Ensure builds only when the rootfs is
// missing or stale, and otherwise costs one manifest read and one stat.
// Verify checks a built tree on the host and inside a real jail, which it
// opens through an OpenJail (rootfs/jailverify: the sandbox), so this
// package does not depend on the sandbox.
package rootfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/execgate/execgate/jaillayout"
)

// Where the builder puts things, who owns them in the jail, the manifest
// and the protocol version are package jaillayout's; this package builds
// and checks a tree that follows it.

// DefaultPython is the host interpreter the rootfs is built from by default.
const DefaultPython = "/usr/bin/python3"

// Options configure Build and Ensure.
type Options struct {
	// Dir is the rootfs directory. Required. It is replaced atomically;
	// an existing non-empty directory that is not a rootfs (no manifest)
	// is never replaced.
	Dir string
	// PythonPath is the host interpreter to copy. Default /usr/bin/python3.
	PythonPath string
	// Progress receives one line per build step. Nil: silent.
	Progress io.Writer
	// CABundle is the PEM bundle to install as the trust store. Default: the
	// first of the well-known bundle paths that exists on the host
	// (/etc/ssl/certs/ca-certificates.crt, /etc/pki/tls/certs/ca-bundle.crt, …).
	CABundle string
	// CADir holds OpenSSL hash-named certificates (<hash>.<n>) copied,
	// dereferenced, into /etc/ssl/certs. Default: /etc/ssl/certs when
	// CABundle is defaulted; empty means "bundle only".
	CADir string
	// DenoPath is the host Deno binary copied into the tree (JavaScript and
	// TypeScript tools). Default: whatever hostbin.Find finds for hostbin.Deno
	// ($EXECGATE_DENO, .tools/bin/deno, $PATH); none found builds a tree
	// without Deno (JavaScript runs are then refused as unavailable). A
	// DenoPath that is not an executable is an error.
	DenoPath string

	// Runtime is the runtime to build: a name of the lock (Lock, default
	// the lock compiled in: "python3.11", "python3.13"), built from its
	// pinned Debian packages, or HostRuntime ("host", also ""), copied
	// from PythonPath. PythonPath, CABundle and CADir apply to the host
	// runtime only.
	Runtime string
	// Lock is the runtime lock. Nil: DefaultLock().
	Lock *Lock
	// DebCache keeps the downloaded .debs, named by their SHA256. Default:
	// ".debs" beside Dir.
	DebCache string
	// DebianMirror replaces the scheme and host of the lock's archive URLs
	// ("http://mirror.example" fetches
	// http://mirror.example/debian/pool/…). Default: the lock's.
	DebianMirror string

	// now is the clock for built_at; nil means time.Now.
	now func() time.Time
}

// Manifest describes a built rootfs (jaillayout.Manifest).
type Manifest = jaillayout.Manifest

// Errors callers branch on.
var (
	// ErrNoManifest means the directory holds no rootfs manifest.
	ErrNoManifest = jaillayout.ErrNoManifest
	// ErrEmptyCAStore means the CA source held no certificate; a rootfs
	// without a trust store is never built (DESIGN §10, §12.4).
	ErrEmptyCAStore = errors.New("CA trust store is empty")
	// ErrNotRootfs means Dir exists, is not empty and is not a rootfs, so
	// Build refuses to replace it.
	ErrNotRootfs = errors.New("directory exists and is not an execgate rootfs")
	// ErrVerify means at least one verification check failed.
	ErrVerify = errors.New("rootfs verification failed")
)

// ReadManifest reads dir's manifest (jaillayout.ReadManifest). A missing
// manifest is ErrNoManifest.
func ReadManifest(dir string) (*Manifest, error) { return jaillayout.ReadManifest(dir) }

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("rootfs dir: must not be empty")
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, fmt.Errorf("rootfs dir: %w", err)
	}
	if abs == "/" {
		return o, errors.New("rootfs dir: refusing to use /")
	}
	o.Dir = abs
	if o.Runtime == "" {
		o.Runtime = HostRuntime
	}
	if o.Lock == nil {
		o.Lock = DefaultLock()
	}
	if o.DebCache == "" {
		o.DebCache = filepath.Join(filepath.Dir(abs), ".debs")
	}
	if o.Runtime != HostRuntime {
		if _, err := o.Lock.Runtime(o.Runtime); err != nil {
			return o, err
		}
	}
	if o.PythonPath == "" {
		o.PythonPath = DefaultPython
	}
	if o.CABundle == "" && o.Runtime == HostRuntime {
		for _, p := range defaultCABundles {
			if _, err := os.Stat(p); err == nil {
				o.CABundle = p
				if o.CADir == "" {
					o.CADir = defaultCADir
				}
				break
			}
		}
		if o.CABundle == "" {
			return o, fmt.Errorf("no CA bundle found on the host (looked at %v; install ca-certificates): %w", defaultCABundles, ErrEmptyCAStore)
		}
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o, nil
}

func (o Options) progress(format string, args ...any) {
	fmt.Fprintf(o.Progress, "rootfs: "+format+"\n", args...)
}
