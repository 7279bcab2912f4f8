package sandbox

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox/harness"
	"github.com/execgate/execgate/sandbox/seccomp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestRenderConfigGolden(t *testing.T) {
	base := renderInput{
		Profile:       profile{Network: NetworkNone, Limits: limits.Default},
		RootfsDir:     "/var/lib/execgate/rootfs",
		CgroupVersion: 1,
		CgroupRoot:    "/sys/fs/cgroup",
		CgroupParent:  "execgate",
		KillGraceMS:   1000,
		Seccomp:       seccomp.Policy(),
	}
	host := base
	host.Profile.Network = NetworkHost
	proxy := base
	proxy.Profile.Network = NetworkProxy
	proxy.Binds = []bind{
		{Src: "/var/lib/execgate/runs/jails/run-1-abc/egress", Dst: jaillayout.EgressDir},
		{Src: "/var/lib/execgate/deps/0123abcd", Dst: jaillayout.DepsDir, Exec: true},
	}
	v2 := base
	v2.CgroupVersion = 2
	v2.Profile.Limits = Limits{TimeoutMS: 30000, CPUMS: 20000, MemoryMB: 512, Pids: 64, OutputBytes: 1 << 16, TmpMB: 16}
	deno := base
	deno.Profile.Runtime = runtimeDeno
	denoCheck := base
	denoCheck.Profile.Runtime = runtimeDenoCheck
	denoProxy := proxy
	denoProxy.Profile.Runtime = runtimeDeno
	denoProxy.Profile.Deps = "0123abcd"
	denoProxy.Binds = []bind{proxy.Binds[0], {Src: "/var/lib/execgate/deps/0123abcd", Dst: jaillayout.DepsDir}}
	tests := []struct {
		name string
		in   renderInput
	}{
		{"none-v1-defaults", base},
		{"deno-none-v1-defaults", deno},
		{"deno-check-none-v1-defaults", denoCheck},
		{"host-v1-defaults", host},
		{"proxy-v1-binds", proxy},
		{"deno-proxy-v1-deps", denoProxy},
		{"none-v2-large", v2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := renderConfig(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "nsjail-"+tt.name+".cfg")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if got != string(want) {
				t.Errorf("rendered config differs from %s (run with -update after checking):\n%s", golden, got)
			}
		})
	}
}

func TestRenderConfigInvariants(t *testing.T) {
	for _, network := range []Network{NetworkNone, NetworkHost} {
		got, err := renderConfig(renderInput{Profile: profile{Network: network, Limits: limits.Default}, RootfsDir: "/r",
			CgroupVersion: 1, CgroupRoot: "/sys/fs/cgroup", CgroupParent: "execgate", KillGraceMS: 1000, Seccomp: "P"})
		if err != nil {
			t.Fatal(err)
		}
		for _, must := range []string{
			"rlimit_nproc: 4096\nrlimit_nproc_type: VALUE\n",
			"rlimit_stack: 8\nrlimit_stack_type: VALUE\n",
			"keep_env: false", "mode: ONCE", "time_limit: 6", "log_fd: 4", "pass_fd: 3",
			`mount { src: "/r" dst: "/" is_bind: true is_dir: true rw: false`,
			// The run's own small tmpfs for its secrets, the tool's, never
			// a bind of anything of the host's.
			`mount { dst: "/run/execgate/secrets" fstype: "tmpfs" options: "size=262144,nr_inodes=64,mode=0700,uid=99999,gid=99999" rw: true nosuid: true nodev: true noexec: true }`,
		} {
			if !strings.Contains(got, must) {
				t.Errorf("network %s: config lacks %q", network, must)
			}
		}
		// The maps are per jail (idMapArgs): one in the file would be
		// added to the flag's, and nsjail refuses two maps of 99999.
		if strings.Contains(got, "uidmap") || strings.Contains(got, "gidmap") {
			t.Errorf("network %s: the profile config carries a uid/gid map", network)
		}
		if hostNet := strings.Contains(got, "clone_newnet: false"); hostNet != (network == NetworkHost) {
			t.Errorf("network %s: clone_newnet false = %t", network, hostNet)
		}
		if binds := strings.Contains(got, `src: "/etc/resolv.conf"`); binds != (network == NetworkHost) {
			t.Errorf("network %s: host resolver bind = %t", network, binds)
		}
	}
}

func TestIDMapArgsMapToolUIDToTheJailsHostUID(t *testing.T) {
	got := strings.Join(idMapArgs(100042), " ")
	if want := "--user 99999:100042:1 --group 99999:100042:1"; got != want {
		t.Errorf("idMapArgs(100042) = %q, want %q", got, want)
	}
}

func TestRenderConfigProxyProfile(t *testing.T) {
	in := renderInput{Profile: profile{Network: NetworkProxy, Limits: limits.Default}, RootfsDir: "/r",
		CgroupVersion: 1, CgroupRoot: "/sys/fs/cgroup", CgroupParent: "execgate", KillGraceMS: 1000, Seccomp: "P",
		Binds: []bind{{Src: "/w/jails/run-1/egress", Dst: jaillayout.EgressDir}}}
	got, err := renderConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{
		"clone_newnet: true",
		`envar: "HTTP_PROXY=http://127.0.0.1:3128"`, `envar: "https_proxy=http://127.0.0.1:3128"`, `envar: "NO_PROXY="`,
		`mount { src: "/w/jails/run-1/egress" dst: "/opt/execgate/egress" is_bind: true is_dir: true rw: false nosuid: true nodev: true noexec: true mandatory: true }`,
	} {
		if !strings.Contains(got, must) {
			t.Errorf("proxy config lacks %q", must)
		}
	}
	none := in
	none.Profile.Network = NetworkNone
	none.Binds = nil
	got, err = renderConfig(none)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "PROXY") || strings.Contains(got, "/opt/execgate/egress") {
		t.Errorf("network none config mentions the proxy:\n%s", got)
	}
	bad := in
	bad.Binds = []bind{{Src: "/w/\n", Dst: jaillayout.EgressDir}}
	if _, err := renderConfig(bad); err == nil || !strings.Contains(err.Error(), "bind") {
		t.Errorf("an unquotable bind source: got %v", err)
	}
}

func TestRenderConfigRejectsUnquotablePaths(t *testing.T) {
	for _, dir := range []string{"/root\nfs", "/rööt"} {
		_, err := renderConfig(renderInput{Profile: profile{Limits: limits.Default}, RootfsDir: dir, CgroupVersion: 1, CgroupRoot: "/c", CgroupParent: "p"})
		if err == nil || !strings.Contains(err.Error(), "rootfs dir") {
			t.Errorf("%q: want an error naming the rootfs dir, got %v", dir, err)
		}
	}
}

func TestQuoteEscapesQuotesAndBackslashes(t *testing.T) {
	if got := q(`a"b\c`); got != `"a\"b\\c"` {
		t.Errorf("q = %s", got)
	}
}

// The Deno profile's needs (64 GiB of address space for V8, its cache
// directory) are granted to it alone: the Python profile is not loosened,
// and no Deno command of network mode none carries an --allow-* flag but
// reading /workspace, writing /workspace/out (a run's files and artifacts)
// and reading and writing the run's secrets directory (the harness revokes
// writing before the tool loads).
func TestRenderDenoNeedsStayInTheDenoProfile(t *testing.T) {
	render := func(rt jailRuntime) string {
		t.Helper()
		got, err := renderConfig(renderInput{Profile: profile{Runtime: rt, Network: NetworkNone, Limits: limits.Default}, RootfsDir: "/r",
			CgroupVersion: 1, CgroupRoot: "/sys/fs/cgroup", CgroupParent: "execgate", KillGraceMS: 1000, Seccomp: "P"})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	py := render(runtimePython)
	if !strings.Contains(py, fmt.Sprintf("rlimit_as: %d\n", limits.Default.MemoryMB+rlimitASHead)) || strings.Contains(py, "DENO_DIR") || strings.Contains(py, "deno") {
		t.Errorf("the python profile carries Deno's grants:\n%s", py)
	}
	for _, rt := range []jailRuntime{runtimeDeno, runtimeDenoCheck} {
		got := render(rt)
		if !strings.Contains(got, "rlimit_as: 65536\n") || !strings.Contains(got, `envar: "DENO_DIR=/opt/execgate/deno-cache"`) {
			t.Errorf("%s profile lacks V8's address space or DENO_DIR:\n%s", rt, got)
		}
		rest := strings.NewReplacer(`arg: "--allow-read=/workspace,/run/execgate/secrets"`, "",
			`arg: "--allow-write=/workspace/out,/run/execgate/secrets"`, "").Replace(got)
		if strings.Contains(rest, "--allow") || strings.Contains(rest, "-A\"") {
			t.Errorf("%s profile grants a Deno permission beyond the workspace and the secrets directory:\n%s", rt, got)
		}
	}
}

// The zygote's child mounts its run's secrets tmpfs itself: with the same
// options as a jail's, at the same place the harnesses write to.
func TestSecretsTmpfsIsTheSameAtBothLevels(t *testing.T) {
	zy, err := fs.ReadFile(harness.FS, harness.ZygoteEntry)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SECRETS_TMPFS = b"([^"]*)"$`).FindSubmatch(zy)
	if m == nil {
		t.Fatal("execgate_zygote.py declares no SECRETS_TMPFS")
	}
	if got := fmt.Sprintf(strings.ReplaceAll(string(m[1]), "%d", "%v"), jaillayout.ToolUID, jaillayout.ToolGID); got != secretsTmpfsOptions {
		t.Errorf("the zygote mounts %q, a jail %q", got, secretsTmpfsOptions)
	}
	for name, decl := range map[string]string{
		harness.ZygoteEntry:   `SECRETS_DIR = b"` + jaillayout.SecretsDir + `"`,
		"execgate_harness.py": `SECRETS_DIR = "` + jaillayout.SecretsDir + `"`,
		harness.JSEntry:       `const SECRETS_DIR = "` + jaillayout.SecretsDir + `";`,
	} {
		src, err := fs.ReadFile(harness.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), decl) {
			t.Errorf("%s lacks %s", name, decl)
		}
	}
}

// Deno's grants follow the profile: every run reads /workspace, writes
// /workspace/out and reads and writes its secrets directory; network none grants nothing more; proxy grants the
// network (the jail's namespace holds only the relay) and the egress
// socket's path, nothing else; host grants the network; a package
// environment swaps the harness's import map and cache for its own and
// turns npm resolution on (its packages are npm: targets of the map).
func TestDenoFlagsFollowTheProfile(t *testing.T) {
	grants := func(flags []string) []string {
		var out []string
		for _, f := range flags {
			if strings.HasPrefix(f, "--allow") {
				out = append(out, f)
			}
		}
		return out
	}
	workspace := []string{"--allow-read=/workspace," + jaillayout.SecretsDir, "--allow-write=/workspace/out," + jaillayout.SecretsDir}
	for _, tc := range []struct {
		name       string
		p          profile
		wantGrants []string
		wantMap    string
		wantNoNPM  bool
		wantDir    string
	}{
		{"none", profile{Runtime: runtimeDeno, Network: NetworkNone}, workspace, "/opt/execgate/harness/import_map.json", true, jaillayout.DenoDir},
		{"proxy", profile{Runtime: runtimeDeno, Network: NetworkProxy},
			[]string{"--allow-read=/workspace," + jaillayout.SecretsDir + "," + jaillayout.EgressSocket, "--allow-write=/workspace/out," + jaillayout.SecretsDir + "," + jaillayout.EgressSocket, "--allow-net"}, "/opt/execgate/harness/import_map.json", true, jaillayout.DenoDir},
		{"host", profile{Runtime: runtimeDeno, Network: NetworkHost}, append(workspace, "--allow-net"), "/opt/execgate/harness/import_map.json", true, jaillayout.DenoDir},
		{"none with packages", profile{Runtime: runtimeDeno, Network: NetworkNone, Deps: "abc"}, workspace, jaillayout.DepsImportMap, false, jaillayout.DepsDenoDir},
		{"proxy with packages", profile{Runtime: runtimeDeno, Network: NetworkProxy, Deps: "abc"},
			[]string{"--allow-read=/workspace," + jaillayout.SecretsDir + "," + jaillayout.EgressSocket, "--allow-write=/workspace/out," + jaillayout.SecretsDir + "," + jaillayout.EgressSocket, "--allow-net"}, jaillayout.DepsImportMap, false, jaillayout.DepsDenoDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := denoFlags(tc.p)
			if got := grants(flags); strings.Join(got, " ") != strings.Join(tc.wantGrants, " ") {
				t.Errorf("grants %q, want %q", got, tc.wantGrants)
			}
			if !slices.Contains(flags, "--import-map="+tc.wantMap) {
				t.Errorf("flags %q lack the import map %s", flags, tc.wantMap)
			}
			if slices.Contains(flags, "--no-npm") != tc.wantNoNPM {
				t.Errorf("flags %q: --no-npm present = %t, want %t", flags, !tc.wantNoNPM, tc.wantNoNPM)
			}
			for _, f := range []string{"--no-remote", "--cached-only", "--no-config", "--no-lock", "--no-prompt"} {
				if !slices.Contains(flags, f) {
					t.Errorf("flags %q lack %s", flags, f)
				}
			}
			env := denoEnv(tc.p)
			for _, want := range []string{"DENO_DIR=" + tc.wantDir, "DENO_EMIT_CACHE_MODE=disable", "DENO_TLS_CA_STORE=system", "SSL_CERT_FILE=" + jaillayout.CABundlePath} {
				if !slices.Contains(env, want) {
					t.Errorf("env %q lacks %s", env, want)
				}
			}
		})
	}
}

// A zygote's config is its profile's, with the differences of package
// zygote's doc: for a Deno profile, the rootfs's python3 runs the zygote
// and names level jail's Deno command (the same flags, heap limit and
// harness) after --exec; the Deno profile's environment and RLIMIT_AS stay.
func TestZygoteConfigOfEachRuntime(t *testing.T) {
	for _, rt := range []jailRuntime{runtimePython, runtimeDeno} {
		p := profile{Runtime: rt, Network: NetworkNone, Limits: limits.Default}
		in := renderInput{Profile: p, RootfsDir: "/r", CgroupVersion: 1, CgroupRoot: "/c", CgroupParent: "p", Seccomp: seccomp.Policy()}
		text, err := renderConfig(in)
		if err != nil {
			t.Fatal(err)
		}
		z, err := zygoteConfig(text, p)
		if err != nil {
			t.Fatalf("%s: %v", rt, err)
		}
		want := []string{"-I", "-S", "-B", "-u", harness.Dir + "/" + harness.ZygoteEntry}
		if rt == runtimeDeno {
			path, args := denoCommand(p)
			want = append(append(want, "--exec", path), args...)
		}
		if !strings.HasSuffix(z, execBlock(jaillayout.PythonPath, want)) || strings.Count(z, "exec_bin {") != 1 {
			t.Fatalf("%s: the zygote's exec_bin is not python3 on the zygote %v:\n%s", rt, want, z)
		}
		for _, l := range []string{"time_limit: 0", "rlimit_cpu_type: INF", "seccomp_string: " + q(seccomp.ZygotePolicy())} {
			if !strings.Contains(z, "\n"+l+"\n") {
				t.Errorf("%s: no line %q", rt, clip(l, 40))
			}
		}
		if deno := strings.Contains(z, fmt.Sprintf("rlimit_as: %d\n", denoRlimitASMB)) && strings.Contains(z, "DENO_DIR="); deno != (rt == runtimeDeno) {
			t.Errorf("%s: the Deno profile's RLIMIT_AS and environment present: %v", rt, deno)
		}
		// A rendering whose exec_bin is not the profile's is refused.
		other := profile{Runtime: runtimeDeno, Network: NetworkNone, Limits: limits.Default}
		if rt == runtimeDeno {
			other.Runtime = runtimePython
		}
		if _, err := zygoteConfig(text, other); err == nil || !strings.Contains(err.Error(), "exec lines") {
			t.Errorf("%s: a config rendered for another runtime gave %v, want the exec mismatch", rt, err)
		}
	}
}
