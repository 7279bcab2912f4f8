package sandbox

import (
	"fmt"
	"strings"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/harness"
)

// Jail constants: what the tool sees.
const (
	// Where things are inside the jail, and who the tool is there, is
	// package jaillayout's: jaillayout.ToolUID/jaillayout.ToolGID, PythonPath, DepsDir,
	// EgressDir, EgressSocket, HarnessDir.
	jailHostname = "execgate"
	// egressProxyURL is where the harness relays to the egress socket,
	// inside the jail (HTTP_PROXY and friends).
	egressProxyURL = "http://127.0.0.1:3128"

	// File descriptors of the jailed process (see jail_linux.go).
	resultFD = 3 // harness → runner: the envelope
	logFD    = 4 // nsjail → runner: nsjail's own log; never passed to the tool
	bridgeFD = 5 // jail ↔ runner: the tool bridge socket (bridge.go)

	// Resource limits that do not come from Limits.
	rlimitNofile = 1024
	// rlimitNproc counts the processes of the jail's uid in its user
	// namespace, i.e. of this jail; the per-run cap is the pids cgroup
	// (Limits.Pids). The *_type: VALUE lines make nsjail apply the
	// rendered values (its default for nproc and stack is its own soft
	// limit).
	rlimitNproc  = 4096
	rlimitStack  = 8    // MiB
	rlimitASHead = 1024 // MiB of address space above Limits.MemoryMB (thread stacks, arenas)

	// nsjailMemSlack is added to nsjail's per-jail memory limit so that the
	// run's own cgroup (limit = Limits.MemoryMB) binds first, even with
	// large folios charged at once, and records the hit (package cgroups).
	nsjailMemSlack = 16 << 20
)

// jailEnv is the whole environment of the tool (keep_env is false).
var jailEnv = []string{
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"HOME=" + jaillayout.TmpDir,
	"TMPDIR=" + jaillayout.TmpDir,
	"LANG=C.UTF-8",
	"PYTHONDONTWRITEBYTECODE=1",
	"PYTHONUNBUFFERED=1",
}

// pythonEnv is added to jailEnv in the Python runtime (level jail, and
// the zygote whose forks are level process): matplotlib starts headless
// with the Agg backend (it never looks for a display, so a figure saved
// with savefig is a PNG in /workspace/out, an artifact), and keeps its
// config and font cache in the run's own /tmp (its default would be
// $HOME/.cache, also the run's /tmp; named here so the place is one the
// tool can write whatever HOME says). The font cache is built afresh in
// each run that imports matplotlib.pyplot: nothing a run writes outlives
// it.
var pythonEnv = []string{
	"MPLBACKEND=Agg",
	"MPLCONFIGDIR=" + jaillayout.TmpDir + "/matplotlib",
}

// proxyEnv is added to jailEnv in network mode proxy: every HTTP client
// that honours the usual variables goes through the egress relay, and
// nothing bypasses it by name (NO_PROXY empty).
var proxyEnv = []string{
	"HTTP_PROXY=" + egressProxyURL,
	"HTTPS_PROXY=" + egressProxyURL,
	"http_proxy=" + egressProxyURL,
	"https_proxy=" + egressProxyURL,
	"NO_PROXY=",
	"no_proxy=",
}

// harnessArgv starts the harness: isolated mode (-I: no user site, no
// PYTHON* variables, no script dir on sys.path), no site module (-S), no
// bytecode writing (-B), unbuffered stdio (-u) so output survives a kill.
var harnessArgv = []string{"-I", "-S", "-B", "-u", harness.Dir + "/" + harness.Entry}

// profile is what two runs must share to use the same nsjail config file
// and the same warm jails. Everything else about a run (its cgroup, its
// dependencies) is passed as nsjail flags or in the request.
type profile struct {
	Runtime jailRuntime // "" means python
	Network Network
	Limits  Limits // defaults applied
	// Deps is the name, under Config.DepsDir, of the package environment
	// bound read-only at jaillayout.DepsDir (an environment id, or the key of a
	// pinned requirement set); "" for none. Such a jail has a config of its
	// own (render binds), but warm jails are kept per Deps like per limits.
	Deps string
	// Zygote marks the profile of a level-process zygote: its config is
	// this profile's, changed by zygoteConfig (zygote.go).
	Zygote bool
}

// Env is the name of the profile's package environment directory ("" for
// none).
func (p profile) Env() string { return p.Deps }

func (p profile) String() string {
	l := p.Limits
	s := fmt.Sprintf("network=%s timeout=%dms cpu=%dms memory=%dMiB pids=%d output=%dB tmp=%dMiB files=%d/%dB artifacts=%d/%dB",
		p.Network, l.TimeoutMS, l.CPUMS, l.MemoryMB, l.Pids, l.OutputBytes, l.TmpMB, l.Files, l.FilesBytes, l.Artifacts, l.ArtifactsBytes)
	if p.Runtime != "" && p.Runtime != runtimePython {
		s = "runtime=" + string(p.Runtime) + " " + s
	}
	if p.Deps != "" {
		s += " deps=" + clip(p.Deps, 12)
	}
	return s
}

// renderInput is everything renderConfig needs; it is pure so the output
// can be checked against golden files.
type renderInput struct {
	Profile       profile
	RootfsDir     string
	CgroupVersion int
	CgroupRoot    string // v1: the directory holding the controller mounts; v2: the cgroup2 mount
	CgroupParent  string
	KillGraceMS   int64
	Seccomp       string
	// Binds are one jail's own host directories (its egress directory, its
	// requirements); a jail with binds gets its own config file.
	Binds []bind
}

// bind is a host directory bound into one jail: never writable, never
// setuid or device-bearing; Exec allows mapping its files executable
// (extension modules of installed requirements).
type bind struct {
	Src, Dst string
	Exec     bool
}

// renderConfig renders the nsjail config (protobuf text format) of one
// profile. Per-run settings (the run's cgroup, the deps mount) are passed as
// flags after --config and override it.
func renderConfig(in renderInput) (string, error) {
	for name, s := range map[string]string{"rootfs dir": in.RootfsDir, "cgroup root": in.CgroupRoot, "cgroup parent": in.CgroupParent} {
		if err := checkConfigString(s); err != nil {
			return "", fmt.Errorf("%s %q: %w", name, s, err)
		}
	}
	for _, m := range in.Binds {
		for _, s := range []string{m.Src, m.Dst} {
			if err := checkConfigString(s); err != nil {
				return "", fmt.Errorf("bind %q: %w", s, err)
			}
		}
	}
	p, l := in.Profile, in.Profile.Limits
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# execgate nsjail profile (generated, do not edit): %s", p)
	w(`name: "execgate"`)
	w("mode: ONCE")
	w("hostname: %s", q(jailHostname))
	w("cwd: %s", q(jaillayout.WorkspaceDir))
	w("time_limit: %d", ceilDiv(l.TimeoutMS+in.KillGraceMS, 1000))
	w("log_fd: %d", logFD)
	w("log_level: INFO")
	w("pass_fd: %d", resultFD)
	w("pass_fd: %d", bridgeFD)
	w("keep_env: false")
	for _, e := range jailEnv {
		w("envar: %s", q(e))
	}
	if !p.Runtime.deno() {
		for _, e := range pythonEnv {
			w("envar: %s", q(e))
		}
	}
	if p.Network == NetworkProxy {
		for _, e := range proxyEnv {
			w("envar: %s", q(e))
		}
	}
	if p.Runtime.deno() {
		for _, e := range denoEnv(p) {
			w("envar: %s", q(e))
		}
	}
	w("keep_caps: false")
	w("disable_no_new_privs: false")
	if p.Runtime.deno() {
		w("rlimit_as: %d", denoRlimitASMB) // V8's reservations; memory is the cgroup's (language.go)
	} else {
		w("rlimit_as: %d", l.MemoryMB+rlimitASHead)
	}
	w("rlimit_core: 0")
	// The harness lowers the soft limit to the CPU limit and reports
	// CPULimit on SIGXCPU; this hard limit kills a tool stuck in C code.
	w("rlimit_cpu: %d", ceilDiv(l.CPUMS, 1000)+1)
	w("rlimit_fsize: %d", l.TmpMB)
	w("rlimit_nofile: %d", rlimitNofile)
	w("rlimit_nproc: %d", rlimitNproc)
	w("rlimit_nproc_type: VALUE")
	w("rlimit_stack: %d", rlimitStack)
	w("rlimit_stack_type: VALUE")
	w("clone_newnet: %t", p.Network != NetworkHost)
	w("clone_newuser: true")
	w("clone_newns: true")
	w("clone_newpid: true")
	w("clone_newipc: true")
	w("clone_newuts: true")
	w("clone_newcgroup: true")
	// No uidmap/gidmap: each jail gets its own host uid as flags
	// (idMapArgs); nsjail would add those to any map of the file.
	w("mount { src: %s dst: \"/\" is_bind: true is_dir: true rw: false nosuid: true nodev: true }", q(in.RootfsDir))
	if p.Network == NetworkHost {
		// A read-only parent does not make bind submounts read-only: each
		// file gets its own read-only bind.
		for _, f := range []string{jaillayout.ResolvConf, jaillayout.Hosts} {
			w("mount { src: %s dst: %s is_bind: true rw: false nosuid: true nodev: true noexec: true mandatory: false }", q(f), q(f))
		}
	}
	for _, m := range in.Binds {
		w("mount { src: %s dst: %s is_bind: true is_dir: true rw: false nosuid: true nodev: true noexec: %t mandatory: true }", q(m.Src), q(m.Dst), !m.Exec)
	}
	w("mount { dst: %s fstype: \"tmpfs\" options: %s rw: true nosuid: true nodev: true noexec: true }", q(jaillayout.TmpDir), q(fmt.Sprintf("size=%d,mode=1777", l.TmpMB<<20)))
	// The run's brokered secrets: written there by the harness from its
	// request (never by the host), gone with the jail.
	w("mount { dst: %s fstype: \"tmpfs\" options: %s rw: true nosuid: true nodev: true noexec: true }", q(jaillayout.SecretsDir), q(secretsTmpfsOptions))
	w("mount { dst: %s fstype: \"tmpfs\" options: \"size=65536,mode=755\" rw: false nosuid: true noexec: true }", q(jaillayout.DevDir))
	for _, d := range jaillayout.Devices {
		w("mount { src: %s dst: %s is_bind: true rw: false nosuid: true noexec: true }", q(d), q(d))
	}
	// POSIX shared memory and semaphores (multiprocessing's Pool, Queue,
	// Lock; shared_memory) live here: a tmpfs of its own, as large as /tmp,
	// its pages charged to the run's memory cgroup like /tmp's.
	w("mount { dst: %s fstype: \"tmpfs\" options: %s rw: true nosuid: true nodev: true noexec: true }", q(jaillayout.DevShmDir), q(fmt.Sprintf("size=%d,mode=1777", l.TmpMB<<20)))
	w("mount { dst: %s fstype: \"proc\" rw: false nosuid: true nodev: true noexec: true }", q(jaillayout.ProcDir))
	w("cgroup_mem_max: %d", l.MemoryMB<<20+nsjailMemSlack)
	w("cgroup_pids_max: %d", l.Pids)
	w("cgroup_cpu_ms_per_sec: %d", cgroups.CPUMsPerSec)
	switch in.CgroupVersion {
	case 1:
		for _, ctrl := range []string{"mem", "pids", "cpu"} {
			dir := map[string]string{"mem": "memory", "pids": "pids", "cpu": "cpu"}[ctrl]
			w("cgroup_%s_mount: %s", ctrl, q(in.CgroupRoot+"/"+dir))
			w("cgroup_%s_parent: %s", ctrl, q(in.CgroupParent))
		}
	case 2:
		w("use_cgroupv2: true")
		w("cgroupv2_mount: %s", q(in.CgroupRoot+"/"+in.CgroupParent))
	default:
		return "", fmt.Errorf("cgroup version %d: not 1 or 2", in.CgroupVersion)
	}
	w("seccomp_string: %s", q(in.Seccomp))
	b.WriteString(execBlock(jailCommand(p)))
	return b.String(), nil
}

// jailCommand is what a jail of profile p runs: the Python harness, or a
// Deno runtime's command (denoCommand).
func jailCommand(p profile) (string, []string) {
	if p.Runtime.deno() {
		return denoCommand(p)
	}
	return jaillayout.PythonPath, harnessArgv
}

// execBlock is the config's exec_bin block (its last) running path with
// argv.
func execBlock(path string, argv []string) string {
	var b strings.Builder
	b.WriteString("exec_bin {\n")
	fmt.Fprintf(&b, "  path: %s\n", q(path))
	for _, a := range argv {
		fmt.Fprintf(&b, "  arg: %s\n", q(a))
	}
	b.WriteString("}\n")
	return b.String()
}

// secretsTmpfsOptions mount the tmpfs of a run's secrets (jail and
// zygote child alike): small, few inodes, the tool's own.
var secretsTmpfsOptions = fmt.Sprintf("size=%d,nr_inodes=64,mode=0700,uid=%d,gid=%d", jaillayout.SecretsTmpfsBytes, jaillayout.ToolUID, jaillayout.ToolGID)

// checkConfigString rejects what the protobuf text quoting below does not
// handle: control characters and non-ASCII.
func checkConfigString(s string) error {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return fmt.Errorf("contains %q: only printable ASCII is allowed", r)
		}
	}
	return nil
}

// q quotes s for the protobuf text format (printable ASCII only; see
// checkConfigString).
func q(s string) string {
	return `"` + protoQuoter.Replace(s) + `"`
}

// protoQuoter is built once: a Replacer builds its tables on first use.
var protoQuoter = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// idMapArgs map jaillayout.ToolUID/jaillayout.ToolGID inside the jail to the jail's host uid
// (and the gid of the same number). They are flags, not part of the
// profile's config: nsjail appends a flag's map to the file's.
func idMapArgs(hostID uint32) []string {
	return []string{
		"--user", fmt.Sprintf("%d:%d:1", jaillayout.ToolUID, hostID),
		"--group", fmt.Sprintf("%d:%d:1", jaillayout.ToolGID, hostID),
	}
}
