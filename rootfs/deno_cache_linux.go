package rootfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/harness"
)

// Deno's code cache in the rootfs.
//
// A Deno with a writable DENO_DIR keeps V8's code cache there (SQLite
// databases: v8_code_cache_v2 and the module analysis caches beside it) and
// skips compiling a module it has seen. The jail's DENO_DIR is read-only, so
// every cold run compiled the harness (and the runtime modules it loads
// lazily) from scratch: about 7–8 ms of CPU per run on Deno 2.9.8. Deno
// reads these databases from a read-only directory (measured) when they are
// in WAL mode with their -wal and -shm files beside them, and have been
// analysed: Deno runs PRAGMA optimize on every open, which on a
// never-analysed database writes, fails read-only, and Deno falls back to
// an empty cache.
//
// So the build runs the tree's own Deno, chrooted into the tree as nobody in
// fresh network, mount, pid, ipc and uts namespaces: the same kind of run as
// compiling the standard library with the tree's python, never a tool's
// code. First on the tree's harness and a constant probe with DenoDir
// writable and every permission denied (Deno fills the cache); then on a
// constant script allowed to read and write DenoDir only, which analyses
// each database, checkpoints its WAL and vacuums it (node:sqlite), so that
// two builds give the same bytes (Deno's own writes race its exit: whether
// a database got analysed, and what its WAL holds, vary); the build leaves
// the -wal and -shm files empty. Last, with DenoDir read-only as in a jail,
// it checks that Deno reports a code cache hit for the harness; otherwise
// the directory is emptied again (Manifest.DenoCodeCache says why).
// Normalising makes the files root-owned and read-only like the rest of the
// tree; the jail binds the tree read-only, and Deno's permissions never let
// the tool read the directory.

// Manifest.DenoCodeCache values.
const (
	denoCacheBuilt = "harness"
	denoCacheNone  = "none: "
)

// denoCacheUID is who the build runs Deno as (nobody).
const denoCacheUID = 65534

// denoCacheProbe is the tool the build runs: it goes through the paths a
// typical run takes (console, context.log, a result).
const denoCacheProbe = "export async function run(args, context) {\n  console.log(\"execgate\");\n  context.log(\"execgate\");\n  return {ok: true};\n}\n"

// denoCacheDBs are the databases Deno keeps in DENO_DIR (Deno 2.9.8).
var denoCacheDBs = []string{"dep_analysis_cache_v2", "node_analysis_cache_v2", "v8_code_cache_v2"}

// denoCacheCompact is the script that makes the databases reproducible
// (see above): only the harness's entries and Deno's own modules' stay
// (V8's cache of the probe differs from build to build, and no tool is the
// probe), and the statistics are made again in a fixed order.
var denoCacheCompact = `import { DatabaseSync } from "node:sqlite";
const harness = "file://` + harness.Dir + `/%";
const keep = {
  dep_analysis_cache_v2: ["DELETE FROM moduleinfocache WHERE specifier NOT LIKE ?", harness],
  v8_code_cache_v2: ["DELETE FROM codecache WHERE specifier NOT LIKE ? AND specifier NOT LIKE 'ext:%'", harness],
};
for (const name of ` + jsStrings(denoCacheDBs) + `) {
  const db = new DatabaseSync("` + jaillayout.DenoDir + `/" + name);
  if (keep[name]) db.prepare(keep[name][0]).run(keep[name][1]);
  db.exec("DROP TABLE IF EXISTS sqlite_stat1; DROP TABLE IF EXISTS sqlite_stat4; ANALYZE; PRAGMA wal_checkpoint(TRUNCATE); VACUUM;");
  const mode = db.prepare("PRAGMA journal_mode").get().journal_mode;
  if (mode !== "wal") throw new Error(name + " is in journal mode " + mode + ", not wal");
  db.close();
}
`

func jsStrings(ss []string) string {
	b, _ := json.Marshal(ss)
	return string(b)
}

// denoCacheTimeout bounds each of those runs.
const denoCacheTimeout = 60 * time.Second

// denoCacheHit is what Deno logs (--log-level=debug) when it uses the
// harness's code cache.
var denoCacheHit = "V8 code cache hit for ES module: file://" + harness.Dir + "/" + harness.JSEntry

// denoCodeCache fills DenoDir in the tree (the last build step: the tree
// is complete and normalised, so nobody can run its Deno) and normalises
// the directory again. It records what it did in b.denoCache; only an
// error of the build itself fails the build.
func (b *builder) denoCodeCache(ctx context.Context) error {
	if b.deno == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		b.denoCache = denoCacheNone + "the build did not run as root (it runs Deno chrooted into the tree)"
		b.opts.progress("  deno code cache: %s", b.denoCache)
		return nil
	}
	dir := b.host(jaillayout.DenoDir)
	if err := os.Chown(dir, denoCacheUID, denoCacheUID); err != nil {
		return err
	}
	why := b.runDenoForCache(ctx, false)
	if why == "" {
		why = b.compactDenoCache(ctx)
	}
	// From here on the directory is read-only for Deno, as in a jail.
	if err := b.normalizeUnder(dir); err != nil {
		return err
	}
	if why == "" {
		why = b.runDenoForCache(ctx, true)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if why != "" {
		b.denoCache = denoCacheNone + why
		b.opts.progress("  deno code cache: %s; left empty", why)
		if err := emptyDir(dir); err != nil {
			return err
		}
	} else {
		b.denoCache = denoCacheBuilt
	}
	return b.normalizeUnder(dir)
}

// runDenoForCache runs the tree's Deno on the harness and the probe, as
// described above; check: with Deno's debug log, and the run must report a
// code cache hit for the harness. It returns why the run did not do what
// it should ("" when it did).
func (b *builder) runDenoForCache(ctx context.Context, check bool) string {
	ctx, cancel := context.WithTimeout(ctx, denoCacheTimeout)
	defer cancel()
	req, err := json.Marshal(map[string]any{
		"protocol_version": jaillayout.ProtocolVersion,
		"language":         "javascript",
		"source":           denoCacheProbe,
		"entrypoint":       "run",
		"args":             map[string]any{},
		"secrets":          map[string]any{},
		"bridge":           map[string]any{},
		"max_log_lines":    10,
	})
	if err != nil {
		return err.Error()
	}
	var stdin bytes.Buffer
	_ = binary.Write(&stdin, binary.BigEndian, uint32(len(req)))
	stdin.Write(req)
	args := []string{"run"}
	if check {
		args = append(args, "--log-level=debug")
	}
	args = append(args, "--no-remote", "--cached-only", "--no-config", "--no-lock", "--no-prompt", "--no-npm",
		"--import-map="+harness.Dir+"/"+harness.ImportMap,
		"--v8-flags="+jaillayout.DenoV8Flags,
		harness.Dir+"/"+harness.JSEntry)
	stdout, stderr, err := b.denoInTree(ctx, jaillayout.DenoDir, args, stdin.Bytes())
	if err != nil {
		return fmt.Sprintf("deno did not run the harness in the tree: %v: %s", err, tail(stderr, 1000))
	}
	if status := envelopeStatus(stdout); status != "ok" {
		return fmt.Sprintf("the harness's probe ended %q: %s", status, tail(stderr, 1000))
	}
	if check && !strings.Contains(stderr, denoCacheHit) {
		return "deno did not use the code cache from a read-only directory"
	}
	return ""
}

// compactDenoCache runs denoCacheCompact and leaves only the databases
// in DenoDir, each with an empty -wal and -shm file (see above). It
// returns why it could not ("" when it did).
func (b *builder) compactDenoCache(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, denoCacheTimeout)
	defer cancel()
	// Deno's own caches for this run are elsewhere (DepsDir, which nobody
	// cannot write: none), so that only the script writes DenoDir.
	_, stderr, err := b.denoInTree(ctx, jaillayout.DepsDir, []string{"eval", "--ext=js", "--no-remote", "--cached-only", "--no-config", "--no-lock", "--no-prompt", "--no-npm",
		"--allow-read=" + jaillayout.DenoDir, "--allow-write=" + jaillayout.DenoDir, denoCacheCompact}, nil)
	if err != nil {
		return fmt.Sprintf("compacting the code cache: %v: %s", err, tail(stderr, 1000))
	}
	dir := b.host(jaillayout.DenoDir)
	if err := emptyDir(dir, denoCacheDBs...); err != nil {
		return err.Error()
	}
	for _, name := range denoCacheDBs {
		for _, side := range []string{"-wal", "-shm"} {
			if err := os.WriteFile(filepath.Join(dir, name+side), nil, 0o644); err != nil {
				return err.Error()
			}
		}
	}
	return ""
}

// denoInTree runs the tree's Deno with args and DENO_DIR denoDir, chrooted
// into the tree as nobody in fresh namespaces (see above), with stdin; it
// returns stdout and stderr (each cut at a bound).
func (b *builder) denoInTree(ctx context.Context, denoDir string, args []string, stdin []byte) ([]byte, string, error) {
	cmd := exec.CommandContext(ctx, jaillayout.DenoPath, args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + jaillayout.TmpDir, "LANG=C.UTF-8", "DENO_DIR=" + denoDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     b.root,
		Credential: &syscall.Credential{Uid: denoCacheUID, Gid: denoCacheUID, Groups: []uint32{}},
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		Pdeathsig:  syscall.SIGKILL,
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &boundedBuffer{b: &stdout, max: 1 << 20}
	cmd.Stderr = &boundedBuffer{b: &stderr, max: 16 << 20}
	err := cmd.Run()
	return stdout.Bytes(), stderr.String(), err
}

// envelopeStatus is the status of the envelope frame (kind 2) in the
// harness's framed stdout; "" when there is none.
func envelopeStatus(out []byte) string {
	for len(out) >= 5 {
		kind, n := out[0], binary.BigEndian.Uint32(out[1:5])
		if uint64(len(out)-5) < uint64(n) {
			return ""
		}
		payload := out[5 : 5+n]
		out = out[5+n:]
		if kind != 2 {
			continue
		}
		var env struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(payload, &env) != nil {
			return ""
		}
		return env.Status
	}
	return ""
}

// boundedBuffer keeps the first max bytes written to it and drops the rest.
type boundedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	if room := w.max - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// emptyDir removes everything inside dir but the entries named keep,
// keeping dir.
func emptyDir(dir string, keep ...string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !slices.Contains(keep, e.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}
