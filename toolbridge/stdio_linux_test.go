package toolbridge_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/execgate/execgate/toolbridge/toolbridgetest"
)

// A descriptor the gateway inherited from its parent without close-on-exec
// (here: opened without O_CLOEXEC, which is the state an inherited one is
// in) does not reach a stdio tool server: it gets stdin, stdout and stderr.
func TestStdioServerGetsOnlyItsStdio(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "inherited-by-the-gateway")
	if err := os.WriteFile(marker, []byte("secret the parent left open\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(marker, syscall.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)

	r := stdioRun(t, "PATH")
	out, err := r.Call(context.Background(), "local.fds", json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var got toolbridgetest.FDsOut
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if len(got.Targets) < 3 {
		t.Fatalf("the server lists no descriptors: %s", out)
	}
	for _, l := range got.Targets {
		if strings.HasSuffix(l, marker) {
			t.Fatalf("the stdio server inherited the gateway's descriptor %q; its descriptors: %q", l, got.Targets)
		}
	}
	// The gateway keeps it: only exec closes it.
	if _, err := syscall.Seek(fd, 0, 0); err != nil {
		t.Fatalf("the gateway's own descriptor was closed: %v", err)
	}
}
