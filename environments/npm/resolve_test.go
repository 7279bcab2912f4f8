package npm_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
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
	t.Run("tarballs in all", func(t *testing.T) {
		// What a tarball holds past its end is downloaded, never
		// extracted: the tarballs have a cap of their own.
		padded := append(testenv.NPMTarball(t, map[string]string{"index.js": "x"}), randomText(64<<10)...)
		reg := testenv.StartNPMRegistry(t, testenv.NPMPackage{Name: "padded", Version: "1.0.0", Raw: padded},
			testenv.NPMPackage{Name: "plain", Version: "1.0.0", Files: map[string]string{"index.js": "x"}})
		limits := npm.Limits{MaxBytes: 32 << 10}
		for _, req := range []string{"padded@1.0.0", "plain@1.0.0"} {
			pkgs, err := resolve(t, reg, req)
			if err != nil {
				t.Fatal(err)
			}
			cache := t.TempDir()
			_, err = install(t, reg, pkgs, npm.InstallOptions{Limits: limits, TarballCache: cache})
			if req == "plain@1.0.0" {
				if err != nil {
					t.Fatalf("plain: %v", err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), "tarballs come to more than the size cap") {
				t.Fatalf("padded: got %v", err)
			}
			if left, _ := filepath.Glob(filepath.Join(cache, "*")); len(left) != 0 {
				t.Errorf("the refused tarball was kept: %v", left)
			}
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

// Whoever publishes a package chooses its dependencies: the packages a
// resolution chooses, the packages it looks up, the dependency entries it
// reads and how deep it goes are bounded, each checked before the requests
// it would cost, and a bound is an error even where an optional
// dependency's failure is skipped.
func TestResolutionIsBounded(t *testing.T) {
	t.Run("packages", func(t *testing.T) {
		optional := map[string]string{}
		pkgs := []testenv.NPMPackage{{Name: "root", Version: "1.0.0", OptionalDependencies: optional}}
		for i := range npm.MaxPackages { // with root, one more than allowed
			name := fmt.Sprintf("p%03d", i)
			optional[name] = "1.0.0"
			pkgs = append(pkgs, testenv.NPMPackage{Name: name, Version: "1.0.0"})
		}
		reg := testenv.StartNPMRegistry(t, pkgs...)
		_, err := resolve(t, reg, "root@1.0.0")
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the dependencies come to more than %d packages (needed by root)", npm.MaxPackages)) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("packages looked up", func(t *testing.T) {
		defer npm.SetCounts(8, 1<<20)()
		optional := map[string]string{}
		for i := range 20 {
			optional[fmt.Sprintf("ghost%02d", i)] = "^1.0.0" // not on the registry: skipped one by one
		}
		reg := testenv.StartNPMRegistry(t, testenv.NPMPackage{Name: "root", Version: "1.0.0", OptionalDependencies: optional})
		_, err := resolve(t, reg, "root@1.0.0")
		if err == nil || !strings.Contains(err.Error(), "the dependencies name more than 8 packages to look up") {
			t.Fatalf("got %v", err)
		}
		if n := reg.Requests("/ghost00"); n != 0 {
			t.Errorf("the registry was asked for ghost00 %d times before the bound", n)
		}
	})
	t.Run("dependency entries", func(t *testing.T) {
		defer npm.SetCounts(1<<20, 10)()
		deps := map[string]string{}
		for i := range 11 {
			deps[fmt.Sprintf("dep%02d", i)] = "^1.0.0"
		}
		reg := testenv.StartNPMRegistry(t, testenv.NPMPackage{Name: "root", Version: "1.0.0", OptionalDependencies: deps})
		_, err := resolve(t, reg, "root@1.0.0")
		if err == nil || !strings.Contains(err.Error(), "more than 10 dependency entries (at root@1.0.0)") {
			t.Fatalf("got %v", err)
		}
		if n := reg.Requests("/dep00"); n != 0 {
			t.Errorf("the registry was asked for dep00 %d times before the bound", n)
		}
	})
	t.Run("depth", func(t *testing.T) {
		// d01 → d02 → … → d33; the last link is optional.
		var pkgs []testenv.NPMPackage
		for i := 1; i <= npm.MaxDepth+1; i++ {
			p := testenv.NPMPackage{Name: fmt.Sprintf("d%02d", i), Version: "1.0.0"}
			switch next := fmt.Sprintf("d%02d", i+1); {
			case i == npm.MaxDepth:
				p.OptionalDependencies = map[string]string{next: "1.0.0"}
			case i < npm.MaxDepth:
				p.Dependencies = map[string]string{next: "1.0.0"}
			}
			pkgs = append(pkgs, p)
		}
		reg := testenv.StartNPMRegistry(t, pkgs...)
		_, err := resolve(t, reg, "d01@1.0.0")
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("d33@1.0.0 is more than %d packages below a requested one (needed by d01 → d02", npm.MaxDepth-1)) {
			t.Fatalf("got %v", err)
		}
		// One level less is allowed.
		got, err := resolve(t, reg, "d02@1.0.0")
		if err != nil || len(got) != npm.MaxDepth {
			t.Fatalf("d02: %d packages, %v", len(got), err)
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
