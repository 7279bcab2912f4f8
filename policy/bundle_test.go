package policy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/stretchr/testify/require"

	"github.com/execgate/execgate/internal/testenv"
)

// bundleServer serves one bundle tarball with an ETag and answers 304 to a
// matching If-None-Match, like an OPA bundle service.
type bundleServer struct {
	*httptest.Server
	mu    sync.Mutex // guards body and etag
	body  []byte
	etag  string
	full  atomic.Int32 // 200 responses
	cache atomic.Int32 // 304 responses
}

func newBundleServer(t *testing.T) *bundleServer {
	t.Helper()
	s := &bundleServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bundles/execgate.tar.gz" {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		body, etag := s.body, s.etag
		s.mu.Unlock()
		if r.Header.Get("If-None-Match") == etag {
			s.cache.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		s.full.Add(1)
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *bundleServer) serve(body []byte) {
	sum := sha256.Sum256(body)
	s.mu.Lock()
	s.body, s.etag = body, `"`+hex.EncodeToString(sum[:8])+`"`
	s.mu.Unlock()
}

func (s *bundleServer) url() string { return s.URL + "/bundles/execgate.tar.gz" }

// signingKey is an ECDSA P-256 key pair; the public half is written to a
// PEM file for BundleConfig.VerificationKey.
type signingKey struct {
	private string // PEM
	pubFile string
}

func newSigningKey(t *testing.T) signingKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "bundle-pub.pem")
	require.NoError(t, os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644))
	return signingKey{private: string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})), pubFile: f}
}

// buildBundle builds a bundle tarball with v1/bundle: one module denying
// tenant demo with reason, signed with key (unless nil); tamper, if set,
// edits the bundle after signing.
func buildBundle(t *testing.T, revision, module string, key *signingKey, tamper func(*bundle.Bundle)) []byte {
	t.Helper()
	b := bundle.Bundle{
		Manifest: bundle.Manifest{Revision: revision},
		Data:     map[string]any{"teamdata": map[string]any{"revision": revision}},
		Modules:  []bundle.ModuleFile{{URL: "/ext/team.rego", Path: "/ext/team.rego", Raw: []byte(module)}},
	}
	if key != nil {
		require.NoError(t, b.GenerateSignature(bundle.NewSigningConfig(key.private, "ES256", ""), "team-key", false))
	}
	if tamper != nil {
		tamper(&b)
	}
	var buf bytes.Buffer
	require.NoError(t, bundle.NewWriter(&buf).Write(b))
	return buf.Bytes()
}

// teamModule denies tenant demo with the bundle data's revision.
const teamModule = `package execgate.main

deny contains sprintf("bundle %s", [data.teamdata.revision]) if input.tenant.id == "demo"
`

func TestBundleSignedPollingAndTamperRefusal(t *testing.T) {
	key := newSigningKey(t)
	srv := newBundleServer(t)
	srv.serve(buildBundle(t, "r1", teamModule, &key, nil))
	logs := &testenv.SyncBuffer{}
	e := newEngine(t, Options{
		Bundle: &BundleConfig{URL: srv.url(), PollSeconds: 1, VerificationKey: key.pubFile, KeyID: "team-key"},
		Logger: slogTo(logs),
	})
	require.Equal(t, []string{"bundle r1"}, reasonsOf(t, e))
	st := e.Status()
	require.Equal(t, "r1", st.Bundle)
	require.Contains(t, st.Revision, "bundle:r1+sha256:")
	require.Contains(t, st.Modules, "bundle:/ext/team.rego")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Watch(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	t.Run("an unchanged bundle is not downloaded again (ETag, 304)", func(t *testing.T) {
		eventually(t, 5*time.Second, "a 304 poll", func() bool { return srv.cache.Load() > 0 })
		require.Equal(t, int32(1), srv.full.Load())
		require.Equal(t, []string{"bundle r1"}, reasonsOf(t, e))
	})

	t.Run("a new signed bundle is served after the next poll", func(t *testing.T) {
		srv.serve(buildBundle(t, "r2", teamModule, &key, nil))
		eventually(t, 5*time.Second, "r2 to be served", func() bool { return slices.Equal(reasonsOf(t, e), []string{"bundle r2"}) })
		require.Equal(t, "r2", e.Status().Bundle)
		require.Empty(t, e.Status().LastError)
	})

	t.Run("a tampered bundle is refused and r2 keeps serving", func(t *testing.T) {
		tampered := buildBundle(t, "r3", teamModule, &key, func(b *bundle.Bundle) {
			b.Modules[0].Raw = []byte("package execgate.main\n\ndeny contains \"tampered\" if false\n")
		})
		srv.serve(tampered)
		eventually(t, 5*time.Second, "the refusal in Status", func() bool { return e.Status().LastError != "" })
		st := e.Status()
		require.Contains(t, st.LastError, srv.url())
		require.Contains(t, st.LastError, "ext/team.rego: digest mismatch")
		require.Equal(t, "r2", st.Bundle)
		require.Equal(t, []string{"bundle r2"}, reasonsOf(t, e))
		require.Contains(t, logs.String(), "policy bundle download refused")

		// Reload retries the download and refuses it again.
		require.ErrorContains(t, e.Reload(context.Background()), "digest mismatch")
		require.Equal(t, []string{"bundle r2"}, reasonsOf(t, e))
	})

	t.Run("a fixed bundle clears the error", func(t *testing.T) {
		srv.serve(buildBundle(t, "r4", teamModule, &key, nil))
		eventually(t, 5*time.Second, "r4 to be served", func() bool { return slices.Equal(reasonsOf(t, e), []string{"bundle r4"}) })
		require.Empty(t, e.Status().LastError)
	})
}

func TestBundleRefusals(t *testing.T) {
	key := newSigningKey(t)
	other := newSigningKey(t)
	tests := []struct {
		name    string
		body    func() []byte
		cfg     func(url string) BundleConfig
		wantErr string
	}{
		{
			name:    "an unsigned bundle when a key is configured",
			body:    func() []byte { return buildBundle(t, "u1", teamModule, nil, nil) },
			wantErr: "missing .signatures.json",
		},
		{
			name:    "a bundle signed with another key",
			body:    func() []byte { return buildBundle(t, "o1", teamModule, &other, nil) },
			wantErr: "verif",
		},
		{
			name: "a signed bundle whose data was changed",
			body: func() []byte {
				return buildBundle(t, "d1", teamModule, &key, func(b *bundle.Bundle) { b.Data["teamdata"] = map[string]any{"revision": "evil"} })
			},
			wantErr: "data.json",
		},
		{
			name:    "a bundle module reaching into a default package",
			body:    func() []byte { return buildBundle(t, "p1", "package execgate.limits\n\nx := 1\n", &key, nil) },
			wantErr: "overlaps the default package execgate.limits",
		},
		{
			name: "bundle data under data.execgate",
			body: func() []byte {
				return buildBundle(t, "x1", teamModule, &key, func(b *bundle.Bundle) {
					b.Data["execgate"] = map[string]any{"platform": map[string]any{}}
					require.NoError(t, b.GenerateSignature(bundle.NewSigningConfig(key.private, "ES256", ""), "team-key", false))
				})
			},
			wantErr: "data.execgate tree belongs to the default policies",
		},
		{
			name: "a server error",
			body: func() []byte { return nil },
			cfg: func(url string) BundleConfig {
				return BundleConfig{URL: url + ".missing", VerificationKey: key.pubFile}
			},
			wantErr: "server replied with Not Found",
		},
	}
	for _, tc := range tests {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			srv := newBundleServer(t)
			srv.serve(tc.body())
			cfg := BundleConfig{URL: srv.url(), VerificationKey: key.pubFile, KeyID: "team-key"}
			if tc.cfg != nil {
				cfg = tc.cfg(srv.url())
			}
			_, err := New(context.Background(), Options{Defaults: defaultsFS, Bundle: &cfg, Logger: quietLogger()})
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestBundleConfigValidate(t *testing.T) {
	key := newSigningKey(t)
	notPEM := filepath.Join(t.TempDir(), "x.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o644))
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"no bundle, no dirs", Config{}, ""},
		{"a good bundle", Config{Bundle: &BundleConfig{URL: "https://bundles.example/b.tar.gz", VerificationKey: key.pubFile}}, ""},
		{"a missing dir", Config{Dirs: []string{"/nonexistent/policies"}}, "policy.dirs[0]"},
		{"a file as dir", Config{Dirs: []string{notPEM}}, "is not a directory"},
		{"a non-http url", Config{Bundle: &BundleConfig{URL: "file:///etc/b.tar.gz"}}, "policy.bundle.url"},
		{"negative poll", Config{Bundle: &BundleConfig{URL: "http://x/b", PollSeconds: -1}}, "poll_seconds"},
		{"a missing key file", Config{Bundle: &BundleConfig{URL: "http://x/b", VerificationKey: "/nonexistent.pem"}}, "verification_key"},
		{"a key file without PEM", Config{Bundle: &BundleConfig{URL: "http://x/b", VerificationKey: notPEM}}, "no PEM block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
