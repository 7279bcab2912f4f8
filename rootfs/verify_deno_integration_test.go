package rootfs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/rootfs/jailverify"
)

// rootfs verify runs a JavaScript probe in a real jail of the Deno profile:
// Deno starts, is the manifest's version, and its permissions hold.
func TestVerifyRunsAJavaScriptProbeInARealJail(t *testing.T) {
	testenv.Deno(t)
	cfg := testenv.SandboxConfig(t)
	r, err := rootfs.Verify(context.Background(), cfg.RootfsDir, jailverify.Opener(cfg))
	var b strings.Builder
	if r != nil {
		r.Print(&b)
	}
	if err != nil {
		t.Fatalf("Verify: %v\n%s", err, b.String())
	}
	if r.Manifest.DenoVersion != "2.9.8" {
		t.Errorf("manifest deno version %q, want the pinned 2.9.8", r.Manifest.DenoVersion)
	}
	if r.Deno == nil || r.Deno.Deno != r.Manifest.DenoVersion || !r.Deno.ReadDenied || !r.Deno.EnvDenied || !r.Deno.NetDenied || !r.Deno.NodeImportDenied {
		t.Fatalf("deno facts %+v\n%s", r.Deno, b.String())
	}
	if !strings.Contains(b.String(), "javascript in jail") {
		t.Errorf("report lacks the javascript check:\n%s", b.String())
	}
}
