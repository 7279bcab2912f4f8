package sandbox_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
)

// jsFetchTool fetches each of args.urls with fetch (which honours
// HTTPS_PROXY and HTTP_PROXY) and tries a direct TCP connection to
// args.direct, reporting what each saw; as "secret", whether its brokered
// secret API_KEY (if any) is the same in context.secrets and in its file
// (body) and what writing the secrets directory gave (error).
const jsFetchTool = `
export async function run(args, context) {
  const out = {};
  const D = "/run/execgate/secrets";
  let writable = "written";
  try { Deno.writeTextFileSync(D + "/NEW", "x"); } catch (e) { writable = e.name; }
  const key = context.secrets.API_KEY;
  out.secret = {status: 0, body: String(key !== undefined && Deno.readTextFileSync(D + "/API_KEY") === key), error: writable};
  for (const [name, url] of Object.entries(args.urls)) {
    try {
      const r = await fetch(url);
      out[name] = {status: r.status, body: (await r.text()).slice(0, 200)};
    } catch (e) {
      out[name] = {status: 0, error: String(e?.message ?? e) + " / " + String(e?.cause?.message ?? e?.cause ?? "")};
    }
  }
  for (const [name, addr] of Object.entries(args.direct ?? {})) {
    try {
      const c = await Deno.connect(addr);
      c.close();
      out[name] = {status: -1, error: "connected"};
    } catch (e) {
      out[name] = {status: 0, error: e.name + ": " + e.message};
    }
  }
  return out;
}
`

// tlsBackend is an HTTPS server on the host's loopback with cert; it
// answers body and the path.
func tlsBackend(t *testing.T, cert tls.Certificate, body string) int {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, body+" "+r.URL.Path)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// jsProxyRunner is proxyRunner over a rootfs whose CA bundle is caPEM
// alone.
func jsProxyRunner(t *testing.T, caPEM []byte, mod func(*sandbox.Config)) *sandbox.Runner {
	t.Helper()
	testenv.Nsjail(t)
	testenv.Deno(t)
	rootfs := testenv.RootfsTrusting(t, caPEM)
	return proxyRunner(t, func(c *sandbox.Config) {
		c.RootfsDir = rootfs
		if mod != nil {
			mod(c)
		}
	})
}

// A JavaScript tool in network mode proxy reaches an allow-listed host over
// HTTPS (fetch through HTTPS_PROXY, CONNECT through the run's egress
// proxy, the certificate checked against the rootfs's CA bundle) and over
// HTTP; a host off the list is refused by the proxy; a certificate from a
// CA outside the bundle fails the handshake; a direct connection reaches
// nothing; the envelope's egress list records the allowed and the denied
// attempts. Cold and warm, with a brokered secret: the tool reads it, and
// the harness's revoking of the secrets directory's write permission
// leaves the egress socket's in place.
func TestJavaScriptNetworkProxy(t *testing.T) {
	ca := testenv.NewCA(t)
	stranger := testenv.NewCA(t)
	tlsPort := tlsBackend(t, ca.Leaf(t, "api.test", "other.test"), "hello over tls")
	untrustedPort := tlsBackend(t, stranger.Leaf(t, "untrusted.test"), "never seen")
	httpPort := backend(t, "hello over http")
	// A listener on the host's loopback the jail must not reach directly.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	hostPort := ln.Addr().(*net.TCPAddr).Port

	spec := sandbox.Spec{ExecutionID: "js-proxy", TenantID: "acme", Language: sandbox.LanguageJavaScript, Source: jsFetchTool,
		Network: sandbox.NetworkProxy,
		EgressAllow: []string{fmt.Sprintf("api.test:%d", tlsPort), fmt.Sprintf("api.test:%d", httpPort),
			fmt.Sprintf("untrusted.test:%d", untrustedPort)},
		Args: mustJSON(t, map[string]any{
			"urls": map[string]string{
				"https":        fmt.Sprintf("https://api.test:%d/secure", tlsPort),
				"http":         fmt.Sprintf("http://api.test:%d/plain", httpPort),
				"denied_https": fmt.Sprintf("https://other.test:%d/", tlsPort),
				"denied_http":  fmt.Sprintf("http://other.test:%d/", httpPort),
				"untrusted":    fmt.Sprintf("https://untrusted.test:%d/", untrustedPort),
			},
			"direct": map[string]any{
				"host_loopback": map[string]any{"hostname": "127.0.0.1", "port": hostPort},
				"public":        map[string]any{"hostname": "192.0.2.1", "port": 443},
			},
		}),
		Secrets: []secrets.Value{secrets.NewValue("API_KEY", secretValue)},
		Limits:  sandbox.Limits{TimeoutMS: 30000, CPUMS: 30000}.Or(limits.Default)}
	check := func(t *testing.T, res sandbox.Result) {
		t.Helper()
		wantOK(t, res, "")
		var out map[string]fetched
		if err := json.Unmarshal(res.Result, &out); err != nil {
			t.Fatal(err)
		}
		t.Logf("tool saw %+v", out)
		if got := out["secret"]; got.Body != "true" || got.Error != "NotCapable" {
			t.Errorf("the brokered secret: %+v, want read alike from context and file (true) and the directory not writable (NotCapable)", got)
		}
		if got := out["https"]; got.Status != 200 || got.Body != "hello over tls /secure" {
			t.Errorf("allowed host over HTTPS: %+v", got)
		}
		if got := out["http"]; got.Status != 200 || got.Body != "hello over http /plain" {
			t.Errorf("allowed host over HTTP: %+v", got)
		}
		if got := out["denied_http"]; got.Status != http.StatusForbidden || !strings.Contains(got.Body, "allow-list") {
			t.Errorf("a host off the list over HTTP: %+v, want 403 naming the allow-list", got)
		}
		if got := out["denied_https"]; got.Status != 0 {
			t.Errorf("a host off the list over HTTPS: %+v, want the tunnel refused", got)
		}
		if got := out["untrusted"]; got.Status != 0 || !strings.Contains(strings.ToLower(got.Error), "certificate") {
			t.Errorf("a certificate from a CA outside the bundle: %+v, want a certificate error", got)
		}
		if got := out["host_loopback"]; got.Status != 0 || !strings.Contains(got.Error, "ConnectionRefused") {
			t.Errorf("a direct connection to the host's loopback: %+v, want refused (the jail's own loopback)", got)
		}
		if got := out["public"]; got.Status != 0 || !strings.Contains(got.Error, "unreachable") {
			t.Errorf("a direct connection to a public address: %+v, want unreachable", got)
		}
		testenv.CheckEgress(t, res.Egress, map[testenv.EgressKey]int{
			{Host: "api.test", Port: tlsPort, Allowed: true}:             1,
			{Host: "api.test", Port: httpPort, Allowed: true}:            1,
			{Host: "other.test", Port: tlsPort, Allowed: false}:          1,
			{Host: "other.test", Port: httpPort, Allowed: false}:         1,
			{Host: "untrusted.test", Port: untrustedPort, Allowed: true}: 1,
		})
		if len(res.Egress) != 5 {
			t.Errorf("egress %+v: want exactly the 5 attempts", res.Egress)
		}
	}
	t.Run("cold", func(t *testing.T) {
		check(t, run(t, jsProxyRunner(t, ca.PEM, nil), spec))
	})
	t.Run("warm", func(t *testing.T) {
		r := jsProxyRunner(t, ca.PEM, func(c *sandbox.Config) { c.WarmPool = 1 })
		run(t, r, spec) // registers the profile; the pool warms it
		waitWarm(t, r, 1)
		hits := sandbox.WarmHits(r)
		res := run(t, r, spec)
		if sandbox.WarmHits(r) != hits+1 {
			t.Fatalf("the proxy-mode run was not served warm")
		}
		check(t, res)
	})
}

// Network mode host (granted by policy to admins only): a JavaScript tool
// uses the host's network, as a Python one does.
func TestJavaScriptNetworkHostReachesTheHost(t *testing.T) {
	port := backend(t, "hello from the host")
	r := newJSRunner(t, nil)
	res := runJS(t, r, sandbox.LanguageJavaScript, `export async function run(args) { const r = await fetch(args.url); return r.status + " " + await r.text() }`,
		func(s *sandbox.Spec) {
			s.Network = sandbox.NetworkHost
			s.Args = mustJSON(t, map[string]string{"url": fmt.Sprintf("http://127.0.0.1:%d/x", port)})
		})
	wantOK(t, res, `"200 hello from the host /x"`)
}
