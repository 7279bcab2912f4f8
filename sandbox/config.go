package sandbox

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox/zygote"
)

// Config is the sandbox section of the execgate config file (DESIGN §13).
// Zero values mean "use the default" as documented per field.
// The package keys (uv_path, deps_timeout_ms, package_index, npm_registry,
// python_platform, deps_max_mb, deps_cache_max_mb, resolve_cache_seconds)
// are read by package environments; the runner reads deps_dir only, which
// its view binds.
type Config struct {
	// NsjailPath is the nsjail binary. Empty: $EXECGATE_NSJAIL, then the
	// project tools link (.tools/bin/nsjail beside the binary's parent
	// directory, or in the working directory or one of its parents), then
	// $PATH.
	NsjailPath string `yaml:"nsjail_path" json:"nsjail_path"`
	// Runtimes are the Python runtimes this process builds and serves, by
	// name: python3.11 (Debian bookworm) and python3.13 (Debian trixie),
	// each a rootfs built from the pinned Debian packages of
	// rootfs/runtimes.lock.json under runtimes_dir, and host, the fallback
	// copied from python_path into rootfs_dir (off unless listed here).
	// The first is the default of a run that names none and skips the
	// policy, and runs JavaScript and TypeScript. Default [python3.11,
	// python3.13].
	Runtimes []string `yaml:"runtimes" json:"runtimes"`
	// RuntimesDir holds the rootfs of each runtime built from packages,
	// <runtimes_dir>/<name>, and the downloaded .debs, named by their
	// SHA256, in <runtimes_dir>/.debs. Empty: <state_dir>/runtimes; outside
	// the config package, "runtimes" beside RootfsDir.
	RuntimesDir string `yaml:"runtimes_dir" json:"runtimes_dir"`
	// DebianMirror replaces the scheme and host of the Debian archives the
	// runtime lock names (http://deb.debian.org): a mirror or an apt
	// cache holding the same paths, e.g. http://mirror.example. Packages
	// are checked against their pinned SHA256 wherever they come from.
	// Empty: the lock's archives, then snapshot.debian.org.
	DebianMirror string `yaml:"debian_mirror" json:"debian_mirror"`
	// PythonPath is the host interpreter the host runtime is built from.
	// Default /usr/bin/python3 (never a pyenv shim).
	PythonPath string `yaml:"python_path" json:"python_path"`
	// RootfsDir is the host runtime's root filesystem (and, for a runner,
	// the rootfs of the runtime it serves). Empty: <state_dir>/rootfs,
	// built on first use.
	RootfsDir string `yaml:"rootfs_dir" json:"rootfs_dir"`
	// WorkDir holds the rendered nsjail configs (one file per profile,
	// named by content hash) and per-run scratch. Empty: <state_dir>/runs;
	// outside the config package, "runs" beside RootfsDir.
	WorkDir string `yaml:"work_dir" json:"work_dir"`
	// Cgroups selects the cgroup version: "auto" (default: detect), "v1", "v2".
	Cgroups string `yaml:"cgroups" json:"cgroups"`
	// WarmPool is the number of pre-spawned jails per profile (at most 8
	// profiles, shared fairly between tenants). Default 0: no pool.
	WarmPool int `yaml:"warm_pool" json:"warm_pool"`
	// KillGraceMS is added to the timeout for nsjail's own time_limit (its
	// backstop if execgate itself dies), and is how long the runner waits
	// after asking nsjail to stop (SIGTERM) before killing it (SIGKILL).
	// Default 1000.
	KillGraceMS int64 `yaml:"kill_grace_ms" json:"kill_grace_ms"`
	// CgroupParent is the cgroup (relative to each hierarchy's root) under
	// which every run gets its own cgroup. Created on start-up when missing.
	// Default "execgate".
	CgroupParent string `yaml:"cgroup_parent" json:"cgroup_parent"`
	// UVPath is the uv binary that installs a run's requirements (wheels
	// only, on the host). Empty: $EXECGATE_UV, then the project tools link
	// (.tools/bin/uv, found like nsjail's), then $PATH. Only runs with
	// requirements need it.
	UVPath string `yaml:"uv_path" json:"uv_path"`
	// DepsDir caches installed requirement sets, one directory per set
	// (named by the hash of the normalised pins), bound read-only into the
	// jails that asked for them (through the runner's view, so the
	// directories above it may be private). Empty: "deps" beside RootfsDir, i.e.
	// <state_dir>/deps.
	DepsDir string `yaml:"deps_dir" json:"deps_dir"`
	// DepsTimeoutMS bounds one requirements install, milliseconds.
	// Default 120000.
	DepsTimeoutMS int64 `yaml:"deps_timeout_ms" json:"deps_timeout_ms"`
	// UIDRange is the host uids (and gids) jails run as, "FIRST-LAST",
	// inclusive: every live jail holds one of its own (mapped to jaillayout.ToolUID
	// inside) until it is gone, across every execgate process on the host,
	// so per-user kernel limits (processes, inotify, message queues, pipe
	// buffers) are per jail. Must not include 0, and should not overlap
	// the host's users or /etc/subuid ranges. Default "100000-165535".
	UIDRange string `yaml:"uid_range" json:"uid_range"`
	// RuntimeDir is a root-owned directory every user can traverse (the
	// jail's uid resolves its mount sources), where each runner mounts the
	// jail's view of RootfsDir, DepsDir and WorkDir (package view) and
	// where the uid leases live. Default "/run/execgate".
	RuntimeDir string `yaml:"runtime_dir" json:"runtime_dir"`
	// PackageIndex is where requirements are resolved and installed from
	// (package environments). Zero: uv's default index (PyPI).
	PackageIndex PackageIndex `yaml:"package_index" json:"package_index"`
	// NPMRegistry is where JavaScript and TypeScript requirements (npm
	// packages) are resolved and downloaded from (package
	// environments/npm). Zero: https://registry.npmjs.org/.
	NPMRegistry NPMRegistry `yaml:"npm_registry" json:"npm_registry"`
	// PythonPlatform is uv's --python-platform for resolving environments
	// (wheels must fit the jail's libc and CPU), for every runtime.
	// Default: each runtime's own, from its C library
	// (x86_64-manylinux_2_36 for python3.11, x86_64-manylinux_2_40 for
	// python3.13), and "<arch>-manylinux_2_28" (x86_64 or aarch64) for
	// the host runtime.
	PythonPlatform string `yaml:"python_platform" json:"python_platform"`
	// DepsMaxMB caps one environment's installed size, MiB; a bigger one is
	// a DependencyError. Default 1024.
	DepsMaxMB int64 `yaml:"deps_max_mb" json:"deps_max_mb"`
	// DepsCacheMaxMB caps the deps dir, MiB: the installed environments
	// and the download caches (uv's, the npm tarballs') together. After an
	// install, the download caches are emptied first (npm tarballs least
	// recently used first, then uv's cache), then the least recently used
	// environments idle for at least 15 minutes are removed until the
	// cache fits (their locks are kept, so their ids still work: they are
	// reinstalled). Default 8192; -1: no cap.
	DepsCacheMaxMB int64 `yaml:"deps_cache_max_mb" json:"deps_cache_max_mb"`
	// ResolveCacheSeconds is how long a resolution of the same requirement
	// list is reused before uv resolves it again (new releases appear
	// after at most this long). Default 600; -1: always resolve.
	ResolveCacheSeconds int64 `yaml:"resolve_cache_seconds" json:"resolve_cache_seconds"`
	// Zygotes is the budget of warm zygotes for isolation level process
	// (zygote.go).
	Zygotes zygote.Config `yaml:"zygotes" json:"zygotes"`
}

// PackageIndex says where uv finds packages. Credentials stay with the
// gateway: uv runs on the host, never in a jail, and gets them through
// its environment, not its argv.
type PackageIndex struct {
	// URL is a simple-API index (a private index or a mirror). Empty: PyPI.
	URL string `yaml:"url" json:"url"`
	// FindLinks are extra directories or URLs of wheels. Default none.
	FindLinks []string `yaml:"find_links" json:"find_links"`
	// NoIndex uses FindLinks only (no index at all). Default false.
	NoIndex bool `yaml:"no_index" json:"no_index"`
	// CredentialsFile holds "username:password" for URL (one line, read at
	// every resolve and install, so a rotated secret needs no restart).
	// Default none.
	CredentialsFile string `yaml:"credentials_file" json:"credentials_file"`
}

// NPMRegistry says where npm packages come from. They are downloaded by
// the gateway (or executor), never in a jail; the token never reaches one.
type NPMRegistry struct {
	// URL is the registry (laid out like npm's: a mirror or a private
	// registry). Empty: https://registry.npmjs.org/.
	URL string `yaml:"url" json:"url"`
	// TokenFile holds a bearer token sent to URL (one line, read at every
	// resolve and install, so a rotated token needs no restart). Default
	// none.
	TokenFile string `yaml:"token_file" json:"token_file"`
}

// DefaultNPMRegistry is NPMRegistry.URL when it is empty.
const DefaultNPMRegistry = "https://registry.npmjs.org/"

// Defaults for Config fields left zero.
const (
	DefaultPythonPath   = "/usr/bin/python3"
	DefaultCgroups      = "auto"
	DefaultCgroupParent = "execgate"
	DefaultKillGraceMS  = 1000
	DefaultDepsTimeout  = 120000 // ms
	DefaultUIDRange     = "100000-165535"
	DefaultRuntimeDir   = "/run/execgate"
	DefaultDepsMaxMB    = 1024
	DefaultDepsCacheMB  = 8192
	DefaultResolveCache = 600 // seconds
)

// DefaultRuntimes are the runtimes served when sandbox.runtimes is empty.
var DefaultRuntimes = []string{"python3.11", "python3.13"}

// WithDefaultRuntimes is c.Runtimes, or DefaultRuntimes when it is empty.
func (c Config) WithDefaultRuntimes() []string {
	return c.WithDefaults().Runtimes
}

// RootfsOf is the rootfs of runtime name: rootfs_dir for the host
// runtime, <runtimes_dir>/<name> for the others.
func (c Config) RootfsOf(name string) string {
	c = c.WithDefaults()
	if name == limits.HostRuntime {
		return c.RootfsDir
	}
	return filepath.Join(c.RuntimesDir, name)
}

// ForRuntime is c for the runner of runtime name: every default applied
// (work and deps dirs stay where c has them), RootfsDir its rootfs.
func (c Config) ForRuntime(name string) Config {
	platform := c.PythonPlatform
	c = c.WithDefaults()
	c.PythonPlatform = platform // "": the runtime's own (NewEnvironments)
	c.RootfsDir = c.RootfsOf(name)
	return c
}

// WithDefaults returns c as the runner uses it: zero fields, the zygotes'
// included, set to their defaults. RootfsDir has no default here: the
// config package derives it from state_dir; NsjailPath and UVPath stay as
// given (FindNsjail and FindUV resolve them).
func (c Config) WithDefaults() Config {
	if len(c.Runtimes) == 0 {
		c.Runtimes = append([]string(nil), DefaultRuntimes...)
	}
	if c.RuntimesDir == "" && c.RootfsDir != "" {
		c.RuntimesDir = filepath.Join(filepath.Dir(filepath.Clean(c.RootfsDir)), "runtimes")
	}
	if c.WorkDir == "" && c.RootfsDir != "" {
		c.WorkDir = filepath.Join(filepath.Dir(filepath.Clean(c.RootfsDir)), "runs")
	}
	if c.DepsDir == "" && c.RootfsDir != "" {
		c.DepsDir = filepath.Join(filepath.Dir(filepath.Clean(c.RootfsDir)), "deps")
	}
	if c.DepsTimeoutMS <= 0 {
		c.DepsTimeoutMS = DefaultDepsTimeout
	}
	if c.DepsMaxMB <= 0 {
		c.DepsMaxMB = DefaultDepsMaxMB
	}
	if c.DepsCacheMaxMB == 0 {
		c.DepsCacheMaxMB = DefaultDepsCacheMB
	}
	if c.ResolveCacheSeconds == 0 {
		c.ResolveCacheSeconds = DefaultResolveCache
	}
	if c.PythonPlatform == "" {
		c.PythonPlatform = defaultPlatform()
	}
	if c.NPMRegistry.URL == "" {
		c.NPMRegistry.URL = DefaultNPMRegistry
	}
	if c.PythonPath == "" {
		c.PythonPath = DefaultPythonPath
	}
	if c.Cgroups == "" {
		c.Cgroups = DefaultCgroups
	}
	if c.CgroupParent == "" {
		c.CgroupParent = DefaultCgroupParent
	}
	if c.KillGraceMS <= 0 {
		c.KillGraceMS = DefaultKillGraceMS
	}
	if c.UIDRange == "" {
		c.UIDRange = DefaultUIDRange
	}
	if c.RuntimeDir == "" {
		c.RuntimeDir = DefaultRuntimeDir
	}
	c.Zygotes = c.Zygotes.WithDefaults()
	return c
}

// ParseUIDRange parses sandbox.uid_range, "FIRST-LAST" (inclusive), refusing 0 (host root)
// and the invalid id 2^32-1.
func ParseUIDRange(s string) (lo, hi uint32, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not FIRST-LAST", s)
	}
	l, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	h, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, fmt.Errorf("%q is not FIRST-LAST (decimal uids)", s)
	case l == 0:
		return 0, 0, fmt.Errorf("%q includes 0 (host root)", s)
	case l > h:
		return 0, 0, fmt.Errorf("%q: FIRST is above LAST", s)
	case h >= 1<<32-1:
		return 0, 0, fmt.Errorf("%q: %d is not a valid uid", s, h)
	}
	return uint32(l), uint32(h), nil
}

// Validate reports configuration errors, naming the key at fault.
func (c Config) Validate() error {
	var errs []error
	c = c.WithDefaults()
	if c.RootfsDir == "" {
		errs = append(errs, errors.New("sandbox.rootfs_dir: must not be empty"))
	}
	if err := c.Zygotes.Validate(); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for i, r := range c.Runtimes {
		switch {
		case !limits.KnownRuntime(r):
			errs = append(errs, fmt.Errorf("sandbox.runtimes[%d]: %q is not one of %s", i, r, strings.Join(limits.Runtimes, ", ")))
		case seen[r]:
			errs = append(errs, fmt.Errorf("sandbox.runtimes[%d]: %s twice", i, r))
		}
		seen[r] = true
	}
	if c.DebianMirror != "" {
		if u, err := url.Parse(c.DebianMirror); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("sandbox.debian_mirror: %q is not an http(s) URL", c.DebianMirror))
		}
	}
	switch c.Cgroups {
	case "auto", "v1", "v2":
	default:
		errs = append(errs, fmt.Errorf("sandbox.cgroups: %q is not auto, v1 or v2", c.Cgroups))
	}
	if c.DepsDir != "" {
		if err := checkConfigString(c.DepsDir); err != nil {
			errs = append(errs, fmt.Errorf("sandbox.deps_dir: %w", err))
		}
	}
	if _, _, err := ParseUIDRange(c.UIDRange); err != nil {
		errs = append(errs, fmt.Errorf("sandbox.uid_range: %w", err))
	}
	if !filepath.IsAbs(c.RuntimeDir) {
		errs = append(errs, fmt.Errorf("sandbox.runtime_dir: %q is not an absolute path", c.RuntimeDir))
	} else if err := checkConfigString(c.RuntimeDir); err != nil {
		errs = append(errs, fmt.Errorf("sandbox.runtime_dir: %w", err))
	}
	if c.PackageIndex.NoIndex && len(c.PackageIndex.FindLinks) == 0 {
		errs = append(errs, errors.New("sandbox.package_index.no_index: needs find_links"))
	}
	if c.PackageIndex.CredentialsFile != "" && c.PackageIndex.URL == "" {
		errs = append(errs, errors.New("sandbox.package_index.credentials_file: needs url"))
	}
	if u, err := url.Parse(c.NPMRegistry.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || !strings.HasSuffix(u.Path, "/") || u.RawQuery != "" || u.Fragment != "" {
		errs = append(errs, fmt.Errorf("sandbox.npm_registry.url: %q is not an http(s) URL ending in /", clip(c.NPMRegistry.URL, 120)))
	}
	if !platformRE.MatchString(c.PythonPlatform) {
		errs = append(errs, fmt.Errorf("sandbox.python_platform: %q is not a uv platform like x86_64-manylinux_2_28", c.PythonPlatform))
	}
	if c.WarmPool < 0 {
		errs = append(errs, fmt.Errorf("sandbox.warm_pool: %d is negative", c.WarmPool))
	}
	if !validCgroupName(c.CgroupParent) {
		errs = append(errs, fmt.Errorf("sandbox.cgroup_parent: %q must be a relative path of [A-Za-z0-9._-] components", c.CgroupParent))
	}
	return errors.Join(errs...)
}

var platformRE = regexp.MustCompile(`^[a-z0-9_]+-[a-z0-9_.-]+$`)

func validCgroupName(s string) bool {
	if s == "" || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") {
		return false
	}
	for _, part := range strings.Split(s, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
		for _, r := range part {
			ok := r == '.' || r == '_' || r == '-' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
			if !ok {
				return false
			}
		}
	}
	return true
}

// defaultPlatform is uv's --python-platform for this machine's jails.
func defaultPlatform() string {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if arch == "" {
		arch = runtime.GOARCH
	}
	return arch + "-manylinux_2_28"
}
