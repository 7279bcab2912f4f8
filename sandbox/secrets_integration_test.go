package sandbox_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
)

// Brokered secrets through the real nsjail, rootfs and harnesses (issue
// #24): granted ones reach the run's tool and nothing else; their values
// never come back.

// secretValue is long and unlike anything else a run prints, so finding a
// piece of it anywhere is a leak.
const secretValue = "sk_live_4f9Qz-Zx81kLmN0pQrSt2uVw-SECRET"

var secretHalves = [2]string{secretValue[:17], secretValue[17:]}

// pySecretProbe reads its secret every way, tries what it may not, and
// tries to send the value back every way it can.
const pySecretProbe = `
import base64, json, os, sys, time
D = "/run/execgate/secrets"
def run(args, context):
    v = context.secrets["API_KEY"]
    st, dst = os.stat(D + "/API_KEY"), os.stat(D)
    with open(D + "/API_KEY") as f:
        from_file = f.read()
    try:
        context.secrets["OTHER"]
        absent = False
    except KeyError:
        absent = True
    try:
        open(D + "/NEW", "w").close()
        writable = True
    except OSError:
        writable = False
    try:
        context.secrets["X"] = "y"
        mutable = True
    except TypeError:
        mutable = False
    mount = [l for l in open("/proc/self/mountinfo") if " " + D + " " in l]  # the last one is on top
    print("stdout:", v)
    sys.stdout.write(v[:17]); sys.stdout.flush(); time.sleep(0.3); sys.stdout.write(v[17:] + "\n"); sys.stdout.flush()
    print("b64:", base64.b64encode(v.encode()).decode())
    print("json:", json.dumps({"k": v}))
    print("stderr:", v, file=sys.stderr)
    context.log("log: " + v)
    return {"leak": v, "nested": {v: [v + "!"]}, "same": from_file == v, "mode": st.st_mode & 0o777,
            "uid": st.st_uid, "dir_mode": dst.st_mode & 0o777, "files": sorted(os.listdir(D)),
            "absent": absent, "writable": writable, "mutable": mutable,
            "tmpfs": bool(mount) and " - tmpfs " in mount[-1]}
`

// checkNoSecret fails when any piece of the secret (either half) is in s.
func checkNoSecret(t *testing.T, where, s string) {
	t.Helper()
	for _, h := range append(secretHalves[:], base64.StdEncoding.EncodeToString([]byte(secretValue))[4:20]) {
		if strings.Contains(s, h) {
			t.Errorf("%s holds the secret (%q): %q", where, h, s)
		}
	}
}

// liveOutput collects a run's live output chunks.
type liveOutput struct {
	mu     sync.Mutex
	chunks map[string][]string
}

func (o *liveOutput) fn(stream string, p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.chunks == nil {
		o.chunks = map[string][]string{}
	}
	o.chunks[stream] = append(o.chunks[stream], string(p))
}

func (o *liveOutput) joined(stream string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.chunks[stream], "")
}

func TestSecretsReachTheToolAndNeverComeBack(t *testing.T) {
	r := newRunner(t, func(c *sandbox.Config) { c.WarmPool = 1 })
	for _, iso := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		t.Run(iso, func(t *testing.T) {
			if iso == sandbox.IsolationJail {
				waitWarm(t, r, 1) // a warm jail gets its secrets at the hand-off
			}
			var live liveOutput
			res, err := r.Run(context.Background(), sandbox.Spec{
				ExecutionID: "secrets-" + iso, TenantID: "t1", Source: pySecretProbe, Isolation: iso,
				Limits: limits.Default, Output: live.fn,
				Secrets: []secrets.Value{secrets.NewValue("API_KEY", secretValue)},
			})
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, detail(err))
			}
			m := resultMap(t, res)
			if res.Usage.Isolation != iso || !res.Usage.Warm {
				t.Fatalf("ran at level %q, warm %v", res.Usage.Isolation, res.Usage.Warm)
			}
			for k, want := range map[string]any{
				"same": true, "mode": float64(0o400), "uid": float64(99999), "dir_mode": float64(0o500),
				"absent": true, "writable": false, "mutable": false, "tmpfs": true, "leak": secrets.Mask,
			} {
				if m[k] != want {
					t.Errorf("%s = %v, want %v (result %s)", k, m[k], want, res.Result)
				}
			}
			if files, _ := json.Marshal(m["files"]); string(files) != `["API_KEY"]` {
				t.Errorf("the secrets directory holds %s", files)
			}
			checkNoSecret(t, "the result", string(res.Result))
			checkNoSecret(t, "stdout", res.Stdout)
			checkNoSecret(t, "stderr", res.Stderr)
			logs, _ := json.Marshal(res.Logs)
			checkNoSecret(t, "the logs", string(logs))
			for _, want := range []string{"stdout: ***\n", "***\n", "b64: ***", `json: {"k": "***"}`} {
				if !strings.Contains(res.Stdout, want) {
					t.Errorf("stdout lacks %q: %q", want, res.Stdout)
				}
			}
			if !strings.Contains(res.Stderr, "stderr: ***") || len(res.Logs) != 1 || res.Logs[0].Message != "log: ***" {
				t.Errorf("stderr %q, logs %+v", res.Stderr, res.Logs)
			}
			// The live output, the half printed before a flush and a pause
			// included, is masked like the final one.
			if got := live.joined(sandbox.StreamStdout); got != res.Stdout {
				t.Errorf("live stdout %q differs from the envelope's %q", got, res.Stdout)
			}
			for _, c := range live.chunks[sandbox.StreamStdout] {
				checkNoSecret(t, "a live stdout chunk", c)
			}
			checkNoSecret(t, "live stderr", live.joined(sandbox.StreamStderr))
		})
	}
}

func TestSecretInAnExceptionIsMasked(t *testing.T) {
	r := newRunner(t, nil)
	for _, iso := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		res, err := r.Run(context.Background(), sandbox.Spec{
			TenantID: "t1", Isolation: iso, Limits: limits.Default,
			Source:  "def run(args, context):\n    key = context.secrets['API_KEY']\n    raise ValueError('bad key ' + key)\n",
			Secrets: []secrets.Value{secrets.NewValue("API_KEY", secretValue)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.ErrorType() != sandbox.ErrToolError || res.Error.Message != "ValueError: bad key ***" || !strings.Contains(res.Error.Traceback, "ValueError: bad key ***") {
			t.Errorf("%s: error %+v", iso, res.Error)
		}
		checkNoSecret(t, iso+": the error", res.Error.Message+res.Error.Traceback)
	}
}

// A run without a grant has an empty secrets directory and an empty
// context.secrets, at both levels and in a warm jail.
func TestRunsWithoutSecretsHaveNone(t *testing.T) {
	r := newRunner(t, func(c *sandbox.Config) { c.WarmPool = 1 })
	waitWarm(t, r, 1)
	src := `
import os
def run(args, context):
    return {"secrets": dict(context.secrets), "files": os.listdir("/run/execgate/secrets")}
`
	jail := run(t, r, sandbox.Spec{TenantID: "t1", Source: src, Limits: limits.Default})
	if !jail.Usage.Warm {
		t.Error("the level-jail run did not take the warm jail")
	}
	for iso, res := range map[string]sandbox.Result{"jail": jail, "process": runProc(t, r, sandbox.Spec{Source: src})} {
		if !jsonEqual(t, res.Result, `{"secrets": {}, "files": []}`) {
			t.Errorf("%s: %s %+v", iso, res.Result, res.Error)
		}
	}
}

// While a run holds its secret (waiting in a tool call), the secret is in
// none of nsjail's argv, environment or config file, nor any file of the
// runner's work directory; neither is it anywhere there after the run. At
// level process it is in no memory of the zygote or its spare processes,
// and neither the next run of the same tenant (without the grant, running
// while the first one holds it, and after) nor another tenant's run finds
// it.
func TestSecretStaysInItsRun(t *testing.T) {
	for _, iso := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		t.Run(iso, func(t *testing.T) {
			work := t.TempDir()
			r := newRunner(t, func(c *sandbox.Config) { c.WorkDir = work })
			long := limits.Default
			long.TimeoutMS = stretch(60000) // it waits while the others look
			holder := sandbox.Spec{
				ExecutionID: "holder", TenantID: "t1", Isolation: iso, Limits: long,
				Source:  "def run(args, context):\n    v = context.secrets['API_KEY']\n    context.tools.run('wait', {})\n    return len(v)\n",
				Secrets: []secrets.Value{secrets.NewValue("API_KEY", secretValue)},
			}
			hunt := func(tenant string) string {
				res := run(t, r, sandbox.Spec{TenantID: tenant, Isolation: iso, Limits: limits.Default, Source: secretHunter})
				if res.Status != sandbox.StatusOK {
					t.Fatalf("the hunter failed: %+v\n%s", res.Error, res.Stderr)
				}
				return string(res.Result)
			}
			res := whileInToolCall(t, r, holder, func() {
				scanHost(t, "while the run holds it", work, true)
				for _, tenant := range []string{"t1", "t2"} {
					if got := hunt(tenant); !strings.Contains(got, `"found":[]`) || !strings.Contains(got, `"readable":[]`) {
						t.Errorf("a run of %s while the secret is held: %s", tenant, got)
					}
				}
			})
			if !jsonEqual(t, res.Result, strconv.Itoa(len(secretValue))) {
				t.Fatalf("the holder: %s %+v", res.Result, res.Error)
			}
			scanHost(t, "after the run", work, false)
			if got := hunt("t1"); !strings.Contains(got, `"found":[]`) {
				t.Errorf("the next run of the same tenant: %s", got)
			}
		})
	}
}

// secretHunter looks for the secret in everything a run can read: the
// secrets directory, every process's environ, cmdline and root (another
// run's /run/execgate/secrets at level process), /tmp, /proc/1's memory.
var secretHunter = fmt.Sprintf(`
import os
NEEDLE = %q.encode()
def scan(path):
    try:
        with open(path, "rb") as f:
            return NEEDLE in f.read(1 << 20)
    except OSError:
        return False
def run(args, context):
    found, readable = [], []
    paths = ["/run/execgate/secrets/" + n for n in os.listdir("/run/execgate/secrets")]
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        paths += ["/proc/%%s/environ" %% pid, "/proc/%%s/cmdline" %% pid, "/proc/%%s/root/run/execgate/secrets/API_KEY" %% pid]
    for d, _, files in os.walk("/tmp"):
        paths += [os.path.join(d, f) for f in files]
    for p in paths:
        if scan(p):
            found.append(p)
    try:
        with open("/proc/1/mem", "rb") as f:
            f.read(1)
        readable.append("/proc/1/mem")
    except OSError:
        pass
    return {"found": found, "readable": readable, "secrets": dict(context.secrets)}
`, secretHalves[0])

// scanHost fails when the secret is in nsjail's argv, environment, config
// file or memory, in any file below the runner's work directory, or (level
// process) in the memory of a zygote or a spare process. Exactly one
// process holds it while the run holds it (the run's own: which proves
// the memory scan finds it), none after.
func scanHost(t *testing.T, when, work string, holding bool) {
	t.Helper()
	needle := []byte(secretHalves[0])
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	nsjails, holders := 0, 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmd, []byte("nsjail")) || !bytes.Contains(cmd, []byte(work)) {
			continue // not a jail of this runner
		}
		nsjails++
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if bytes.Contains(cmd, needle) || bytes.Contains(env, needle) {
			t.Errorf("%s: nsjail's argv or environment holds the secret: %q", when, cmd)
		}
		args := strings.Split(string(cmd), "\x00")
		for i, a := range args {
			if a == "--config" && i+1 < len(args) {
				if cfg, err := os.ReadFile(args[i+1]); err != nil || bytes.Contains(cfg, needle) {
					t.Errorf("%s: nsjail's config %s: holds the secret or is unreadable (%v)", when, args[i+1], err)
				}
			}
		}
		if processHolds(pid, needle) {
			t.Errorf("%s: nsjail (pid %d) holds the secret in its memory", when, pid)
		}
		// nsjail's child: a jail's harness, or a zygote; a zygote's
		// children: its spares, and the run it forked.
		for _, child := range childPIDs(pid) {
			if processHolds(child, needle) {
				holders++
				if jailRuns := len(childPIDs(child)) == 0; !jailRuns {
					t.Errorf("%s: a zygote (pid %d) holds the secret in its memory", when, child)
				}
			}
			for _, grandchild := range childPIDs(child) {
				if processHolds(grandchild, needle) {
					holders++
				}
			}
		}
	}
	if want := map[bool]int{true: 1, false: 0}[holding]; holders != want {
		t.Errorf("%s: %d processes hold the secret, want %d (the run's own)", when, holders, want)
	}
	if nsjails == 0 && holding {
		t.Errorf("%s: found no nsjail of this runner to look at", when)
	}
	err = filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, needle) {
			t.Errorf("%s: %s holds the secret", when, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// childPIDs are pid's children.
func childPIDs(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// processHolds reads every readable mapping of pid's memory (as root) and
// reports whether needle is in it.
func processHolds(pid int, needle []byte) bool {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return false
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return false
	}
	defer mem.Close()
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' || strings.HasSuffix(line, "[vvar]") || strings.HasSuffix(line, "[vsyscall]") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		a, _ := strconv.ParseUint(lo, 16, 64)
		b, _ := strconv.ParseUint(hi, 16, 64)
		if b <= a || b-a > 1<<30 {
			continue
		}
		buf := make([]byte, b-a)
		n, _ := mem.ReadAt(buf, int64(a))
		if bytes.Contains(buf[:n], needle) {
			return true
		}
	}
	return false
}

func TestJavaScriptSecretsReachTheToolAndNeverComeBack(t *testing.T) {
	r := newJSRunner(t, nil)
	src := `
const D = "/run/execgate/secrets";
export function run(args, context) {
  const v = context.secrets.API_KEY;
  let writable = true;
  try { Deno.writeTextFileSync(D + "/NEW", "x"); } catch (e) { writable = e.name; }
  let mutable = true;
  try { context.secrets.X = "y"; mutable = context.secrets.X === "y"; } catch (e) { mutable = false; }
  console.log("stdout:", v);
  console.error("stderr:", v);
  context.log("log: " + v);
  return { leak: v, same: v === context.secrets["API_KEY"] && Deno.readTextFileSync(D + "/API_KEY") === v,
           mode: Deno.statSync(D + "/API_KEY").mode & 0o777, absent: context.secrets.OTHER === undefined,
           writable, mutable, files: [...Deno.readDirSync(D)].map((e) => e.name) };
}
`
	for _, c := range []struct{ lang, iso string }{{"javascript", sandbox.IsolationJail}, {"typescript", sandbox.IsolationJail}, {"javascript", sandbox.IsolationProcess}, {"typescript", sandbox.IsolationProcess}} {
		lang := c.lang + " at level " + c.iso
		runJS := func(t *testing.T, r *sandbox.Runner, _, src string, mod func(*sandbox.Spec)) sandbox.Result {
			t.Helper()
			res := runJS(t, r, c.lang, src, func(s *sandbox.Spec) {
				s.Isolation = c.iso
				if mod != nil {
					mod(s)
				}
			})
			if res.Usage.Isolation != c.iso {
				t.Fatalf("%s: ran at level %q", lang, res.Usage.Isolation)
			}
			return res
		}
		res := runJS(t, r, lang, src, func(s *sandbox.Spec) {
			s.Secrets = []secrets.Value{secrets.NewValue("API_KEY", secretValue)}
		})
		wantOK(t, res, `{"leak": "***", "same": true, "mode": 256, "absent": true, "writable": "NotCapable", "mutable": false, "files": ["API_KEY"]}`)
		checkNoSecret(t, lang+": stdout", res.Stdout)
		checkNoSecret(t, lang+": stderr", res.Stderr)
		if res.Stdout != "stdout: ***\n" || res.Stderr != "stderr: ***\n" || len(res.Logs) != 1 || res.Logs[0].Message != "log: ***" {
			t.Errorf("%s: stdout %q, stderr %q, logs %+v", lang, res.Stdout, res.Stderr, res.Logs)
		}
		none := runJS(t, r, lang, `export function run(a, c) { return [Object.keys(c.secrets), [...Deno.readDirSync("/run/execgate/secrets")].length]; }`, nil)
		wantOK(t, none, `[[], 0]`)
		thrown := runJS(t, r, lang, `export function run(a, c) { throw new Error("bad key " + c.secrets.API_KEY); }`, func(s *sandbox.Spec) {
			s.Secrets = []secrets.Value{secrets.NewValue("API_KEY", secretValue)}
		})
		wantErr(t, thrown, sandbox.ErrToolError, "bad key ***")
		checkNoSecret(t, lang+": the error", thrown.Error.Message+thrown.Error.Traceback)
	}
}

// The runner refuses secrets the harness could not hold, before any jail.
func TestBadSecretsAreRefusedBeforeTheRun(t *testing.T) {
	r := newRunner(t, nil)
	for name, vals := range map[string][]secrets.Value{
		"a name that is no identifier": {secrets.NewValue("../x", "value-1")},
		"a name given twice":           {secrets.NewValue("A", "value-1"), secrets.NewValue("A", "value-2")},
		"an empty value":               {secrets.NewValue("A", "")},
		"a value with a NUL":           {secrets.NewValue("A", "val\x00ue")},
	} {
		res := run(t, r, sandbox.Spec{TenantID: "t1", Source: "def run(a, c): return 1", Limits: limits.Default, Secrets: vals})
		if res.ErrorType() != sandbox.ErrInvalidInput || !strings.Contains(res.Error.Message, "secrets") {
			t.Errorf("%s: %+v", name, res.Error)
		}
	}
}
