package npm_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/internal/testenv"
)

var linuxX64 = npm.Platform{OS: "linux", CPU: "x64"}

func resolve(t *testing.T, reg *testenv.NPMRegistry, reqs ...string) ([]npm.Package, error) {
	t.Helper()
	rs, err := npm.ParseRequirements(reqs)
	if err != nil {
		t.Fatalf("ParseRequirements: %v", err)
	}
	return npm.Resolve(context.Background(), &npm.Registry{URL: reg.URL}, linuxX64, rs)
}

// keys renders a resolution as "name@version[<-parent]" in lock order.
func keys(pkgs []npm.Package) string {
	var out []string
	for _, p := range pkgs {
		k := p.Key()
		if !p.Requested {
			k += "<-" + p.Parent
		}
		out = append(out, k)
	}
	return strings.Join(out, " ")
}

func TestResolveFindsTheWholeClosure(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "app", Version: "1.0.0", Dependencies: map[string]string{"mid": "^2.0.0", "@scope/util": "~1.1"}},
		testenv.NPMPackage{Name: "mid", Version: "2.0.0"},
		testenv.NPMPackage{Name: "mid", Version: "2.3.0", Dependencies: map[string]string{"leaf": "1.x"}},
		testenv.NPMPackage{Name: "mid", Version: "3.0.0"},
		testenv.NPMPackage{Name: "mid", Version: "2.4.0-beta.1"},
		testenv.NPMPackage{Name: "@scope/util", Version: "1.1.5", Dependencies: map[string]string{"leaf": ">=1.2.0 <2"}},
		testenv.NPMPackage{Name: "@scope/util", Version: "1.2.0"},
		testenv.NPMPackage{Name: "leaf", Version: "1.2.0"},
		testenv.NPMPackage{Name: "leaf", Version: "1.5.0", Deprecated: "use 1.2"},
		testenv.NPMPackage{Name: "leaf", Version: "2.0.0"},
	)
	reg.Tag("mid", "latest", "3.0.0")
	reg.Tag("leaf", "latest", "2.0.0")
	pkgs, err := resolve(t, reg, "app@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	// mid: the highest 2.x release (latest is 3.0.0, outside the range; the
	// prerelease is not asked for); leaf: 1.5.0 is deprecated, so 1.2.0,
	// chosen once for both ranges.
	want := "@scope/util@1.1.5<-app@1.0.0 app@1.0.0 leaf@1.2.0<-@scope/util@1.1.5 mid@2.3.0<-app@1.0.0"
	if got := keys(pkgs); got != want {
		t.Fatalf("resolved %s\nwant     %s", got, want)
	}
	for _, p := range pkgs {
		if !strings.HasPrefix(p.Integrity, "sha512-") {
			t.Errorf("%s has integrity %q", p.Key(), p.Integrity)
		}
	}
	if c := npm.Chain(pkgs, pkgs[2]); strings.Join(c, " → ") != "app → @scope/util → leaf" {
		t.Errorf("chain of leaf = %v", c)
	}
}

func TestResolvePrefersLatestAndReusesChosenVersions(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "a", Version: "1.0.0", Dependencies: map[string]string{"c": "^1.0.0"}},
		testenv.NPMPackage{Name: "b", Version: "1.0.0", Dependencies: map[string]string{"c": "1.1.0", "d": "next"}},
		testenv.NPMPackage{Name: "c", Version: "1.0.0"},
		testenv.NPMPackage{Name: "c", Version: "1.1.0"},
		testenv.NPMPackage{Name: "c", Version: "1.4.0"},
		testenv.NPMPackage{Name: "d", Version: "1.0.0"},
		testenv.NPMPackage{Name: "d", Version: "2.0.0-rc.1"},
	)
	reg.Tag("c", "latest", "1.1.0")
	reg.Tag("d", "latest", "1.0.0")
	reg.Tag("d", "next", "2.0.0-rc.1")
	pkgs, err := resolve(t, reg, "a@1.0.0", "b@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	// c: latest (1.1.0) meets ^1.0.0 and is taken over 1.4.0, then reused
	// for b's exact 1.1.0; d: the "next" tag.
	want := "a@1.0.0 b@1.0.0 c@1.1.0<-a@1.0.0 d@2.0.0-rc.1<-b@1.0.0"
	if got := keys(pkgs); got != want {
		t.Fatalf("resolved %s\nwant     %s", got, want)
	}
}

func TestResolveFollowsAliasesPeersAndPlatformOptionals(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "host", Version: "1.0.0",
			Dependencies:         map[string]string{"old-name": "npm:real@^3.0.0"},
			PeerDependencies:     map[string]string{"peer": "^1.0.0", "maybe": "*"},
			OptionalPeers:        []string{"maybe"},
			OptionalDependencies: map[string]string{"native-linux": "1.0.0", "native-mac": "1.0.0", "missing-opt": "1.0.0"}},
		testenv.NPMPackage{Name: "real", Version: "3.2.1"},
		testenv.NPMPackage{Name: "peer", Version: "1.0.4"},
		testenv.NPMPackage{Name: "maybe", Version: "1.0.0"},
		testenv.NPMPackage{Name: "native-linux", Version: "1.0.0", OS: []string{"linux"}, CPU: []string{"x64", "arm64"}},
		testenv.NPMPackage{Name: "native-mac", Version: "1.0.0", OS: []string{"darwin"}},
	)
	// old-name is an alias of real; peer is a required peer, maybe an
	// optional one (left out); native-mac is for another os and
	// missing-opt is not on the registry: optional, both left out.
	pkgs, err := resolve(t, reg, "host@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	want := "host@1.0.0 native-linux@1.0.0<-host@1.0.0 peer@1.0.4<-host@1.0.0 real@3.2.1<-host@1.0.0"
	if got := keys(pkgs); got != want {
		t.Fatalf("resolved %s\nwant     %s", got, want)
	}
}

func TestResolveRefusals(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "gitdep", Version: "1.0.0", Dependencies: map[string]string{"x": "git+https://example.com/x.git"}},
		testenv.NPMPackage{Name: "filedep", Version: "1.0.0", Dependencies: map[string]string{"x": "file:../x"}},
		testenv.NPMPackage{Name: "ghdep", Version: "1.0.0", Dependencies: map[string]string{"x": "user/repo"}},
		testenv.NPMPackage{Name: "needs-missing", Version: "1.0.0", Dependencies: map[string]string{"ghost": "^1.0.0"}},
		testenv.NPMPackage{Name: "needs-newer", Version: "1.0.0", Dependencies: map[string]string{"leaf": "^9.0.0"}},
		testenv.NPMPackage{Name: "leaf", Version: "1.0.0"},
	)
	for _, tc := range []struct{ req, want string }{
		{"gitdep@1.0.0", "git, file, link and URL dependencies are not installed"},
		{"filedep@1.0.0", "not a registry version"},
		{"ghdep@1.0.0", "not a registry version"},
		{"needs-missing@1.0.0", "ghost: no such package on the registry (needed by needs-missing)"},
		{"needs-newer@1.0.0", "leaf@^9.0.0: no published version matches (needed by needs-newer)"},
		{"leaf@2.0.0", "leaf@2.0.0: no published version matches"},
		{"nothere@1.0.0", "no such package"},
	} {
		t.Run(tc.req, func(t *testing.T) {
			_, err := resolve(t, reg, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("a registry that is down", func(t *testing.T) {
		rs, _ := npm.ParseRequirements([]string{"leaf@1.0.0"})
		_, err := npm.Resolve(context.Background(), &npm.Registry{URL: "http://127.0.0.1:1/"}, linuxX64, rs)
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rs, _ := npm.ParseRequirements([]string{"leaf@1.0.0"})
		_, err := npm.Resolve(ctx, &npm.Registry{URL: reg.URL}, linuxX64, rs)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
}

func TestRequirementsAreExactVersionsOfValidNames(t *testing.T) {
	good := []string{"left-pad@1.3.0", "@scope/pkg@2.0.0-rc.1", "JSONStream@1.3.5", "lodash.merge@4.6.2"}
	if _, err := npm.ParseRequirements(good); err != nil {
		t.Fatalf("good requirements refused: %v", err)
	}
	for _, bad := range []string{"left-pad", "left-pad@^1.3.0", "left-pad@latest", "left-pad@1.3", "npm:left-pad@1.3.0",
		"left-pad@v1.3.0", "../x@1.0.0", "@scope@1.0.0", ".hidden@1.0.0", "_under@1.0.0", "a b@1.0.0", "git+https://x/y.git",
		"x@file:../y", "x@https://example.com/x.tgz", "@Scope/x@1.0.0", ""} {
		if _, err := npm.ParseRequirements([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := npm.ParseRequirements([]string{"a@1.0.0", "a@2.0.0"}); err == nil || !strings.Contains(err.Error(), "names a again") {
		t.Errorf("a package named twice: %v", err)
	}
}

// What a registry sends is bounded: one package's metadata, one tarball,
// and the metadata one resolution holds in all.
func TestRegistryAnswersAreBounded(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "a", Version: "1.0.0", Dependencies: map[string]string{"b": "1.0.0", "c": "1.0.0"}},
		testenv.NPMPackage{Name: "b", Version: "1.0.0", Files: map[string]string{"big.txt": randomText(64 << 10)}},
		testenv.NPMPackage{Name: "c", Version: "1.0.0"},
	)
	t.Run("metadata in all", func(t *testing.T) {
		defer npm.SetBounds(600, 1<<20, 1<<20)()
		_, err := resolve(t, reg, "a@1.0.0")
		if err == nil || !strings.Contains(err.Error(), "metadata of the dependencies comes to more than") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("one package's metadata", func(t *testing.T) {
		defer npm.SetBounds(1<<20, 100, 1<<20)()
		_, err := resolve(t, reg, "a@1.0.0")
		if err == nil || !strings.Contains(err.Error(), "more than 100 bytes") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("one tarball", func(t *testing.T) {
		pkgs, err := resolve(t, reg, "b@1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		defer npm.SetBounds(1<<20, 1<<20, 1<<10)()
		err = npm.Install(context.Background(), &npm.Registry{URL: reg.URL}, pkgs, t.TempDir(), npm.InstallOptions{BaseImportMap: []byte(baseMap)})
		if err == nil || !strings.Contains(err.Error(), "more than 1024 bytes") {
			t.Fatalf("got %v", err)
		}
	})
}

// randomText is n bytes that do not compress.
func randomText(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(rand.Text())
	}
	return b.String()[:n]
}
