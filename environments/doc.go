// Package environments makes the package environments runs bind: Python
// ones here, npm ones (JavaScript and TypeScript runs) through package
// environments/npm (ResolveNPM, NPMFromLock; the same ids, cache, locks
// on disk, eviction and Installing). For Python, it resolves requirement
// lists with uv into locks, names each locked set by
// its content, installs it once (wheels only, hashes required) into the
// deps cache, keeps the cache under its cap (evicting the least recently
// used), and hands the directory to bind to the runner (Spec.Deps), which
// never installs anything. The execute flow (package execution), POST
// /v1/prepare and a dispatching gateway's resolver (package dispatch) use
// it; an executor installs the locks its runs carry (Installing).
//
// A run's requirements are PEP 508 strings ("requests>=2,<3", "six==1.16.0",
// "attrs[tests]"), not only exact pins. They are resolved by uv
// (`uv pip compile --only-binary :all:`, for the rootfs's Python version and
// Config.PythonPlatform) into a lock: every distribution of the complete set,
// transitive dependencies included, pinned with ==, with its hashes, the
// index it came from and what pulled it in (uv's "# via" and "# from"
// annotations). The gateway hands the locked set to the policy, so every
// package is checked, not only the requested ones.
//
// An environment is named by its lock: the environment id is the sha256 of
// the recipe version, the Python version, the platform and the lock's
// canonical lines (name==version and sorted hashes; comments ignored). It is
// installed once, from the lock (`uv pip install --no-deps --require-hashes
// --only-binary :all:`, so exactly the locked files and no package code
// runs on the host), into <DepsDir>/<id>, and bound read-only into the jails
// that use it. The lock is kept in <DepsDir>/.env/<id>.txt, so an id stays
// usable (`environment_id`) even after its directory was evicted: it is
// reinstalled from the lock, for recordTTL (7 days) from its last use.
//
// A caller may also pass a lock directly (pip's hashes format, as written by
// `uv pip compile --generate-hashes` or pip-tools): every entry must be an
// exact pin with at least one --hash; no options, URLs or markers.
//
// Layout of <DepsDir>:
//
//	<id>/               an installed environment (complete once under this name)
//	<id>.lock           flock serialising installs of <id> across processes
//	                    (swept when idle and <id> is not installed)
//	.env/<id>.txt       the lock of environment <id> (swept 7 days after its
//	                    last use once <id> is not installed)
//	.resolved/<key>.txt a resolution of a requirement list, reused for
//	                    Config.ResolveCacheSeconds (then swept)
//	.cache/uv/          uv's download cache  } counted toward the cap and
//	.cache/npm/         verified npm tarballs } trimmed before environments
//	.tmp-*              installs in progress (swept when abandoned)
//
// Exact pins (PreparePins), the older direct form: a set of
// "name==version" installed without resolution. A set may ask for third-party packages as exact pins, "name==version"
// (extras allowed: "name[extra]==version"). Nothing else is accepted: no
// ranges, URLs, paths, markers or installer options, so the set installed
// is exactly the set the policy saw.
//
// A set is installed once, on the host, by uv into
// <DepsDir>/<sha256 of the sorted, normalised pins and the interpreter
// version>, and bound read-only at /opt/execgate/deps into every jail that
// asks for the same set; the harness appends that directory to sys.path.
// The install is safe to run outside the jail because no package code runs:
//
//   - wheels only (--only-binary :all:): no sdist, so no setup.py or build
//     backend is ever executed;
//   - no dependency resolution (--no-deps): every installed distribution is
//     one the request named (and the policy allowed);
//   - installing a wheel unpacks files and writes metadata; bytecode is
//     compiled by the host interpreter's compiler, which does not import
//     the modules;
//   - .pth files a wheel may ship are never processed: the jail's
//     interpreter runs without site (-S) and the deps directory is a plain
//     sys.path entry.
//
// Concurrent runs asking for the same set wait for one install (within the
// process, and across processes through a lock file); the set appears under
// its final name with one atomic rename, so a directory under its final name
// is always complete. A failed install leaves nothing behind and is reported
// as DependencyError with uv's output.
package environments
