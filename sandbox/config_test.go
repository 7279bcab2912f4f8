package sandbox

import (
	"strings"
	"testing"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"defaults with a rootfs are valid", Config{RootfsDir: "/var/lib/execgate/rootfs"}, ""},
		{"the rootfs dir is required", Config{}, "sandbox.rootfs_dir"},
		{"cgroups must be auto, v1 or v2", Config{RootfsDir: "/r", Cgroups: "v3"}, "sandbox.cgroups"},
		{"the warm pool cannot be negative", Config{RootfsDir: "/r", WarmPool: -1}, "sandbox.warm_pool"},
		{"the cgroup parent must be relative", Config{RootfsDir: "/r", CgroupParent: "/abs"}, "sandbox.cgroup_parent"},
		{"the cgroup parent cannot climb", Config{RootfsDir: "/r", CgroupParent: "a/../b"}, "sandbox.cgroup_parent"},
		{"a nested cgroup parent is fine", Config{RootfsDir: "/r", CgroupParent: "system.slice/execgate"}, ""},
		{"the uid range must not include root", Config{RootfsDir: "/r", UIDRange: "0-1000"}, "sandbox.uid_range"},
		{"the uid range is FIRST-LAST", Config{RootfsDir: "/r", UIDRange: "100000"}, "sandbox.uid_range"},
		{"a one-uid range is fine", Config{RootfsDir: "/r", UIDRange: "200000-200000"}, ""},
		{"the runtime dir must be absolute", Config{RootfsDir: "/r", RuntimeDir: "run/execgate"}, "sandbox.runtime_dir"},
		{"a private npm registry is fine", Config{RootfsDir: "/r", NPMRegistry: NPMRegistry{URL: "https://npm.example.com/repository/npm/"}}, ""},
		{"the npm registry ends in a slash", Config{RootfsDir: "/r", NPMRegistry: NPMRegistry{URL: "https://npm.example.com/npm"}}, "sandbox.npm_registry.url"},
		{"the npm registry is http(s)", Config{RootfsDir: "/r", NPMRegistry: NPMRegistry{URL: "file:///srv/npm/"}}, "sandbox.npm_registry.url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func TestConfigDefaultsWorkDirBesideTheRootfs(t *testing.T) {
	c := Config{RootfsDir: "/var/lib/execgate/rootfs"}.WithDefaults()
	if c.WorkDir != "/var/lib/execgate/runs" || c.KillGraceMS != DefaultKillGraceMS || c.CgroupParent != "execgate" {
		t.Errorf("%+v", c)
	}
}

func TestNormalizeSpec(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string // error substring; "" for valid
	}{
		{"a spec with only limits gets the other defaults", Spec{Limits: limits.Default}, ""},
		{"a spec without limits is refused, not defaulted", Spec{}, "limits.timeout_ms: 0 is not positive"},
		{"a missing limit is named", Spec{Limits: Limits{TimeoutMS: 1000, CPUMS: 1000, MemoryMB: 64, Pids: 8, OutputBytes: 1000}}, "limits.tmp_mb"},
		{"a limit above the platform maximum is refused", Spec{Limits: Limits{TimeoutMS: limits.Max.TimeoutMS + 1}.Or(limits.Default)}, "limits.timeout_ms"},
		{"an unknown language", Spec{Language: "ruby", Limits: limits.Default}, "language"},
		{"javascript is supported", Spec{Language: "javascript", Limits: limits.Default}, ""},
		{"typescript is supported", Spec{Language: "typescript", Limits: limits.Default}, ""},
		{"javascript may use the proxy", Spec{Language: "javascript", Network: NetworkProxy, Limits: limits.Default}, ""},
		{"javascript may bind packages", Spec{Language: "javascript", Deps: "/var/lib/execgate/deps/0123", Limits: limits.Default}, ""},
		{"validate is for javascript and typescript only", Spec{Mode: ModeValidate, Limits: limits.Default}, "mode"},
		{"the entrypoint must be an identifier", Spec{Entrypoint: "os.system", Limits: limits.Default}, "entrypoint"},
		{"an unknown mode", Spec{Mode: "debug", Limits: limits.Default}, "mode"},
		{"an unknown network", Spec{Network: "wifi", Limits: limits.Default}, "network"},
		{"args must be JSON", Spec{Args: []byte("{"), Limits: limits.Default}, "args"},
		{"variables must be an object", Spec{Variables: []byte("[1]"), Limits: limits.Default}, "variables"},
		{"a lock is not installed by the runner", Spec{Lock: "six==1.16.0 --hash=sha256:" + strings.Repeat("0", 64), Limits: limits.Default}, "lock: the runner installs nothing"},
		{"too little memory to start", Spec{Limits: Limits{MemoryMB: 4}.Or(limits.Default)}, "limits.memory_mb: 4 is below the minimum of 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, p, err := normalize(tt.spec)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				network := tt.spec.Network
				if network == "" {
					network = NetworkNone
				}
				if got.Entrypoint != "run" || got.Mode != "run" || p.Network != network || p.Limits != limits.Default {
					t.Errorf("defaults not applied: %+v %+v", got, p)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func TestNormalizeSpecAcceptsProxyAndPins(t *testing.T) {
	got, p, err := normalize(Spec{Network: NetworkProxy, Deps: "/var/lib/execgate/deps/0123", Limits: limits.Default})
	if err != nil {
		t.Fatal(err)
	}
	if p.Network != NetworkProxy || got.Deps != "/var/lib/execgate/deps/0123" {
		t.Errorf("network %s, deps %q", p.Network, got.Deps)
	}
	data, err := encodeRequest(got, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"deps":true`, `"egress_socket":"` + jaillayout.EgressSocket + `"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("request lacks %s: %s", want, data)
		}
	}
	none, _, _ := normalize(Spec{})
	data, _ = encodeRequest(none, 0)
	if strings.Contains(string(data), "egress_socket") || !strings.Contains(string(data), `"deps":false`) {
		t.Errorf("network none request: %s", data)
	}
}

func TestTestModeRunsWithNetworkNoneOnly(t *testing.T) {
	if _, p, err := normalize(Spec{Mode: "test", Limits: limits.Default}); err != nil || p.Network != NetworkNone {
		t.Errorf("test mode: network %s, err %v", p.Network, err)
	}
	for _, n := range []Network{NetworkHost, NetworkProxy} {
		if _, _, err := normalize(Spec{Mode: "test", Network: n, Limits: limits.Default}); err == nil || !strings.Contains(err.Error(), "test mode runs with network none") {
			t.Errorf("test mode with network %s: err %v, want a refusal", n, err)
		}
	}
}

func TestEncodeRequestPassesFixturesOnlyInTestMode(t *testing.T) {
	spec, _, _ := normalize(Spec{ToolFixtures: []byte(`{"t": 1}`), Limits: limits.Default})
	data, err := encodeRequest(spec, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"tools":{}`) || !strings.Contains(string(data), `"deadline_unix_ms":6000`) {
		t.Errorf("run mode request: %s", data)
	}
	spec.Mode = "test"
	data, _ = encodeRequest(spec, 1000)
	if !strings.Contains(string(data), `"tools":{"t":1}`) {
		t.Errorf("test mode request: %s", data)
	}
}
