package runtimes

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox"
)

// A Set of runtimes whose runners could not be made: routing and refusals
// need no jail (the runs themselves are tested with real runners in app's
// runtimes tests).
func TestASetRefusesARuntimeItDoesNotServeOrCannotRunNamingIt(t *testing.T) {
	broken := &sandbox.UnavailableError{Reason: "nsjail is missing", Hint: "install it"}
	set, err := New(
		&Runtime{Name: "python3.11", Manifest: &jaillayout.Manifest{Runtime: "python3.11", PythonVersion: "3.11.2", Distribution: "debian bookworm", CACerts: 148,
			Packages: []jaillayout.Package{{Name: "zlib1g", Version: "1"}, {Name: "libc6", Version: "2.36"}}}, Err: broken},
		&Runtime{Name: "python3.13", Manifest: &jaillayout.Manifest{Runtime: "python3.13", DenoVersion: "2.9.8"}, Err: errors.New("rootfs build failed")},
	)
	if err != nil {
		t.Fatal(err)
	}
	if set.Usable() {
		t.Error("a set without a runner says it is usable")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		spec sandbox.Spec
		want string
	}{
		{"a runtime not served", sandbox.Spec{Runtime: "host"}, `runtime "host" is not served here (it serves python3.11, python3.13)`},
		{"a runtime whose runner failed", sandbox.Spec{Runtime: "python3.11"}, "runtime python3.11: nsjail is missing"},
		{"a Python run naming none goes to the first", sandbox.Spec{}, "runtime python3.11: nsjail is missing"},
		{"another error keeps its text", sandbox.Spec{Runtime: "python3.13"}, "runtime python3.13 is unavailable: rootfs build failed"},
		{"JavaScript goes to a runtime with Deno, else the first", sandbox.Spec{Language: sandbox.LanguageJavaScript}, "runtime python3.11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := set.Run(ctx, tc.spec)
			var ue *sandbox.UnavailableError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an UnavailableError saying %q", err, tc.want)
			}
		})
	}
	if _, err := set.Run(ctx, sandbox.Spec{Runtime: "host"}); !errors.Is(err, ErrNotServed) {
		t.Errorf("a runtime not served: %v, want ErrNotServed", err)
	}
	if _, err := set.Environments(sandbox.LanguagePython, "python3.11"); err == nil || !strings.Contains(err.Error(), "python3.11") {
		t.Errorf("environments of a runtime without them: %v", err)
	}
	list, err := set.Runtimes(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("Runtimes = %v, %v", list, err)
	}
	if l := list[0]; l.Name != "python3.11" || l.PythonVersion != "3.11.2" || l.CACerts != 148 || l.Available ||
		!strings.Contains(l.Error, "nsjail is missing") || len(l.Packages) != 2 || l.Packages[0].Name != "libc6" {
		t.Errorf("python3.11 = %+v", l)
	}
	if l := list[1]; l.Deno != "2.9.8" || l.Distribution != "host" || l.Packages == nil {
		t.Errorf("python3.13 = %+v (a manifest without a distribution is the host's; packages never null)", l)
	}
	if _, err := New(); err == nil {
		t.Error("an empty set was made")
	}
	if _, err := New(&Runtime{Name: "a", Err: broken}, &Runtime{Name: "a", Err: broken}); err == nil {
		t.Error("a set with a runtime twice was made")
	}
}

// Package environments follow the run's language: a Python run's are its
// runtime's; a JavaScript or TypeScript run's (npm packages) are those of
// the runtime that runs it (the first here: no runtime has a runner), the
// runtime it names, if any, ignored.
func TestEnvironmentsFollowTheLanguage(t *testing.T) {
	broken := errors.New("no runner")
	envs := func() *environments.Cache {
		return environments.NewNPM(sandbox.Config{DepsDir: t.TempDir()}, nil)
	}
	first, second := envs(), envs()
	set, err := New(&Runtime{Name: "python3.11", Envs: first, Err: broken}, &Runtime{Name: "python3.13", Envs: second, Err: broken})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		language, runtime string
		want              *environments.Cache
	}{
		{sandbox.LanguagePython, "python3.13", second},
		{sandbox.LanguagePython, "", first},
		{sandbox.LanguageJavaScript, "", first},
		{sandbox.LanguageTypeScript, "python3.13", first},
	} {
		if got, err := set.Environments(tc.language, tc.runtime); err != nil || got != tc.want {
			t.Errorf("Environments(%s, %q) = %p, %v; want %p", tc.language, tc.runtime, got, err, tc.want)
		}
	}
	if _, err := set.Environments(sandbox.LanguagePython, "host"); !errors.Is(err, ErrNotServed) {
		t.Errorf("a Python runtime not served: %v, want ErrNotServed", err)
	}
}
