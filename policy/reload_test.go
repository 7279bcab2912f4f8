package policy

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/execgate/execgate/internal/testenv"
)

func denyModule(reason string) string {
	return fmt.Sprintf("package execgate.main\n\ndeny contains %q if input.tenant.id == \"demo\"\n", reason)
}

func reasonsOf(t *testing.T, e *Engine) []string {
	t.Helper()
	d, err := e.Decide(context.Background(), BuildInput(demoTenant(), executor(), Request{}))
	require.NoError(t, err)
	return d.Reasons
}

func TestWatchReloadsOnEditAndKeepsServingOnBrokenEdit(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "team.rego", denyModule("v1"))
	logs := &testenv.SyncBuffer{}
	e := newEngine(t, Options{Dirs: []string{dir}, Logger: slogTo(logs)})
	require.Equal(t, []string{"v1"}, reasonsOf(t, e))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	})
	// Watch registers its watches asynchronously: repeat the first edit
	// until it is picked up.
	deadline := time.Now().Add(5 * time.Second)
	for served := false; !served; {
		require.True(t, time.Now().Before(deadline), "the watcher never picked up an edit")
		writeFile(t, dir, "team.rego", denyModule("v2"))
		start := time.Now()
		for !served && time.Since(start) < time.Second {
			time.Sleep(20 * time.Millisecond)
			served = slices.Equal(reasonsOf(t, e), []string{"v2"})
		}
	}

	t.Run("an edit is served within 2 s", func(t *testing.T) {
		writeFile(t, dir, "team.rego", denyModule("v3"))
		eventually(t, 2*time.Second, "v3 to be served", func() bool { return slices.Equal(reasonsOf(t, e), []string{"v3"}) })
		require.Empty(t, e.Status().LastError)
	})

	t.Run("a new file in a new subdirectory is served", func(t *testing.T) {
		writeFile(t, dir+"/sub", "more.rego", denyModule("sub"))
		eventually(t, 2*time.Second, "sub to be served", func() bool { return slices.Equal(reasonsOf(t, e), []string{"sub", "v3"}) })
		require.NoError(t, os.RemoveAll(dir+"/sub"))
		eventually(t, 2*time.Second, "sub to be gone", func() bool { return slices.Equal(reasonsOf(t, e), []string{"v3"}) })
	})

	t.Run("a broken edit keeps the old policies serving and shows the error", func(t *testing.T) {
		rev := e.Status().Revision
		writeFile(t, dir, "team.rego", "package execgate.main\n\ndeny contains \"v4\" if {\n")
		eventually(t, 2*time.Second, "the error in Status", func() bool { return e.Status().LastError != "" })
		st := e.Status()
		require.Contains(t, st.LastError, "team.rego")
		require.Equal(t, rev, st.Revision)
		require.Equal(t, []string{"v3"}, reasonsOf(t, e))
		require.Contains(t, logs.String(), "policy reload failed")
	})

	t.Run("a forbidden module is refused the same way", func(t *testing.T) {
		writeFile(t, dir, "team.rego", "package execgate.main\n\ndeny contains \"x\" if http.send({\"method\": \"GET\", \"url\": \"http://127.0.0.1:1\"})\n")
		eventually(t, 2*time.Second, "the http.send error", func() bool { return containsStr(e.Status().LastError, "http.send") })
		require.Equal(t, []string{"v3"}, reasonsOf(t, e))
	})

	t.Run("fixing the file clears the error", func(t *testing.T) {
		writeFile(t, dir, "team.rego", denyModule("v5"))
		eventually(t, 2*time.Second, "v5 to be served", func() bool { return slices.Equal(reasonsOf(t, e), []string{"v5"}) })
		require.Empty(t, e.Status().LastError)
	})
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "team.rego", denyModule("v1"))
	e := newEngine(t, Options{Dirs: []string{dir}})

	writeFile(t, dir, "team.rego", denyModule("v2"))
	require.NoError(t, e.Reload(context.Background()))
	require.Equal(t, []string{"v2"}, reasonsOf(t, e))

	writeFile(t, dir, "team.rego", "package execgate.network\n\nmode := \"host\"\n")
	err := e.Reload(context.Background())
	require.ErrorContains(t, err, "overlaps the default package execgate.network")
	require.Equal(t, []string{"v2"}, reasonsOf(t, e))
	require.Contains(t, e.Status().LastError, "overlaps the default package")

	require.NoError(t, os.Remove(dir+"/team.rego"))
	require.NoError(t, e.Reload(context.Background()))
	require.Equal(t, []string{}, reasonsOf(t, e))
	require.Empty(t, e.Status().LastError)

	require.NoError(t, os.RemoveAll(dir))
	require.ErrorContains(t, e.Reload(context.Background()), "reading policy dir")
}

func TestReloadOnSignal(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "team.rego", denyModule("v1"))
	e := newEngine(t, Options{Dirs: []string{dir}})
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { e.ReloadOnSignal(ctx, sig); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	writeFile(t, dir, "team.rego", denyModule("v2"))
	require.Equal(t, []string{"v1"}, reasonsOf(t, e), "no reload without the signal (no watcher running)")
	sig <- syscall.SIGHUP
	eventually(t, 2*time.Second, "v2 after SIGHUP", func() bool { return slices.Equal(reasonsOf(t, e), []string{"v2"}) })
}

func TestConcurrentDecideDuringReload(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "team.rego", denyModule("v0"))
	e := newEngine(t, Options{Dirs: []string{dir}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for ctx.Err() == nil {
				d, err := e.Decide(ctx, BuildInput(demoTenant(), executor(), Request{}))
				if err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
				if err == nil && (d.Allow || len(d.Reasons) != 1) {
					errs <- fmt.Errorf("decision %+v during reload", d)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range 10 {
		writeFile(t, dir, "team.rego", denyModule(fmt.Sprintf("v%d", i)))
		require.NoError(t, e.Reload(ctx))
	}
	cancel()
	for range 2 {
		require.NoError(t, <-errs)
	}
}

func containsStr(s, sub string) bool { return strings.Contains(s, sub) }
