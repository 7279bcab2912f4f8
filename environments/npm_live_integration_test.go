package environments_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// leftPadIntegrity is what registry.npmjs.org publishes for left-pad@1.3.0.
const leftPadIntegrity = "sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQGinBN9yTQT3bFlCBy/aVx2HrNcqQGsdot8ghrjyrvMCoEA=="

// The real npm registry, end to end: left-pad@1.3.0 resolves to the
// integrity npm publishes, installs, and a JavaScript tool imports it in a
// jail. It reaches the public registry, as the matplotlib tests reach
// PyPI (app/images_e2e_test.go); every other npm test serves its own
// registry on loopback.
func TestNPMRegistryLive(t *testing.T) {
	testenv.Deno(t)
	cfg := sandbox.Config{RootfsDir: testenv.Rootfs(t), DepsDir: filepath.Join(testenv.JailDir(t), "deps")}
	envs := environments.NewNPM(cfg, nil)
	env, failure, err := envs.ResolveNPM(context.Background(), []string{"left-pad@1.3.0"})
	if err != nil || failure != nil {
		t.Fatalf("ResolveNPM: %v %+v", err, failure)
	}
	want := "# execgate npm lock 1\nleft-pad@1.3.0 " + leftPadIntegrity + "\n"
	if env.Lock != want {
		t.Fatalf("lock:\n%s\nwant:\n%s", env.Lock, want)
	}
	dir, _, failure, err := envs.Prepare(context.Background(), env)
	if err != nil || failure != nil {
		t.Fatalf("Prepare: %v %+v", err, failure)
	}
	r := newRunner(t, cfg)
	res := run(t, r, sandbox.Spec{Language: sandbox.LanguageJavaScript, Deps: dir, Limits: limits.Default,
		Source: `import leftPad from "left-pad"; export function run() { return leftPad("7", 3, "0") }`})
	if res.Status != sandbox.StatusOK || string(res.Result) != `"007"` {
		b, _ := json.Marshal(res)
		t.Fatalf("run: %s", b)
	}
}
