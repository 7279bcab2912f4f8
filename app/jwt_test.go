package app_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
)

// TestJWTAttacksRunNothing sends forged and broken tokens at a gateway
// that trusts a dev HS256 key, an RSA PEM key and a JWKS (EC key "ec-1"):
// every one is refused with 401 (or 403 for a tenant mismatch) and nothing
// reaches the sandbox.
func TestJWTAttacksRunNothing(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	pemFile := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(pemFile, rsaPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	set := testenv.JWKSet(t, map[string]any{"ec-1": &ecKey.PublicKey})
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(set) }))
	t.Cleanup(idp.Close)

	s := start(t, setup{mutate: func(c *config.Config) {
		c.Auth.PublicKeys = []string{pemFile}
		c.Auth.JWKSURL = idp.URL
	}})
	devKey, err := auth.ReadHMACKey(s.cfg.Auth.HS256SecretFile)
	if err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	claims := func(mut func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": "execgate", "aud": "execgate", "sub": "mallory", "tenant_id": "demo",
			"roles": []string{"executor"}, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		if mut != nil {
			mut(c)
		}
		return c
	}
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims, kid string) string {
		tok := jwt.NewWithClaims(m, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		out, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	enc := base64.RawURLEncoding.EncodeToString
	unsigned := func(alg string) string {
		h, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
		p, _ := json.Marshal(claims(nil))
		return enc(h) + "." + enc(p) + "."
	}
	withCrit := func(m jwt.SigningMethod, key any, kid string) string {
		tok := jwt.NewWithClaims(m, claims(nil))
		tok.Header["crit"] = []string{"exp"}
		if kid != "" {
			tok.Header["kid"] = kid
		}
		out, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	stringExp := func(c jwt.MapClaims) { c["exp"] = strconv.FormatInt(now.Add(time.Hour).Unix(), 10) }
	tamper := func(tok string) string {
		parts := strings.Split(tok, ".")
		p, _ := json.Marshal(claims(func(c jwt.MapClaims) { c["tenant_id"] = "acme"; c["roles"] = []string{"executor", "admin"} }))
		parts[1] = enc(p)
		return strings.Join(parts, ".")
	}

	body := `{"source":"def run(args, context):\n    return 1\n"}`
	tests := []struct {
		name   string
		token  string
		body   string
		status int
	}{
		{"alg none", unsigned("none"), body, 401},
		{"alg None", unsigned("None"), body, 401},
		{"alg NONE", unsigned("NONE"), body, 401},
		{"alg nOnE", unsigned("nOnE"), body, 401},
		{"HS256 signed with the RSA public key as secret", sign(jwt.SigningMethodHS256, rsaPEM, claims(nil), ""), body, 401},
		{"HS256 with the RSA public key and the JWKS kid", sign(jwt.SigningMethodHS256, rsaPEM, claims(nil), "ec-1"), body, 401},
		{"expired", sign(jwt.SigningMethodHS256, devKey, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() }), ""), body, 401},
		{"nbf in the future", sign(jwt.SigningMethodHS256, devKey, claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() }), ""), body, 401},
		{"missing exp", sign(jwt.SigningMethodHS256, devKey, claims(func(c jwt.MapClaims) { delete(c, "exp") }), ""), body, 401},
		{"wrong iss", sign(jwt.SigningMethodRS256, rsaKey, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), ""), body, 401},
		{"wrong aud", sign(jwt.SigningMethodES256, ecKey, claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" }), "ec-1"), body, 401},
		{"unknown kid", sign(jwt.SigningMethodES256, ecKey, claims(nil), "ghost"), body, 401},
		{"crit header, dev HS256", withCrit(jwt.SigningMethodHS256, devKey, ""), body, 401},
		{"crit header, PEM RS256", withCrit(jwt.SigningMethodRS256, rsaKey, ""), body, 401},
		{"crit header, JWKS ES256", withCrit(jwt.SigningMethodES256, ecKey, "ec-1"), body, 401},
		{"exp as a string, dev HS256", sign(jwt.SigningMethodHS256, devKey, claims(stringExp), ""), body, 401},
		{"exp as a string, PEM RS256", sign(jwt.SigningMethodRS256, rsaKey, claims(stringExp), ""), body, 401},
		{"exp as a string, JWKS ES256", sign(jwt.SigningMethodES256, ecKey, claims(stringExp), "ec-1"), body, 401},
		{"tampered payload", tamper(sign(jwt.SigningMethodHS256, devKey, claims(nil), "")), body, 401},
		{"tampered JWKS token", tamper(sign(jwt.SigningMethodES256, ecKey, claims(nil), "ec-1")), body, 401},
		{"a body tenant_id other than the token's", sign(jwt.SigningMethodRS256, rsaKey, claims(nil), ""), `{"tenant_id":"acme","source":"def run(a, c):\n    return 1\n"}`, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			audits := len(s.auditLines())
			r := s.execute(tt.token, tt.body)
			want := map[int]string{401: "Unauthenticated", 403: "Forbidden"}[tt.status]
			if r.status != tt.status || r.errType(t) != want {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tt.status, want)
			}
			if tt.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			wantAudit := map[int]int{401: 0, 403: 1}[tt.status]
			if got := len(s.auditLines()) - audits; got != wantAudit {
				t.Errorf("%d audit records, want %d", got, wantAudit)
			}
		})
	}
	if n := s.runs.Load(); n != 0 {
		t.Fatalf("%d runs reached the sandbox during the attacks", n)
	}

	// The same keys do let the real tokens through (the table is not
	// passing because nothing works).
	for name, tok := range map[string]string{
		"dev HS256":   sign(jwt.SigningMethodHS256, devKey, claims(nil), ""),
		"PEM RS256":   sign(jwt.SigningMethodRS256, rsaKey, claims(nil), ""),
		"JWKS ES256":  sign(jwt.SigningMethodES256, ecKey, claims(nil), "ec-1"),
		"leeway okay": sign(jwt.SigningMethodHS256, devKey, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-5 * time.Second).Unix() }), ""),
	} {
		if r := s.execute(tok, body); r.status != 200 {
			t.Errorf("%s token refused: %d %s", name, r.status, r.body)
		}
	}
	if n := s.runs.Load(); n != 4 {
		t.Fatalf("%d runs for 4 good tokens", n)
	}
}

// TestUnknownKIDSaysSo: a JWKS-style token (RS256 with a kid) whose kid the
// JWKS does not hold is refused as "unknown key id", with whether the
// gateway re-fetched the JWKS, even when a PEM key of the same algorithm is
// configured (which used to turn it into "invalid signature").
func TestUnknownKIDSaysSo(t *testing.T) {
	idpKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&pemKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pemFile := filepath.Join(t.TempDir(), "partner.pem")
	if err := os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	set := testenv.JWKSet(t, map[string]any{"rs-1": &idpKey.PublicKey})
	var fetches atomic.Int64
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		_, _ = w.Write(set)
	}))
	t.Cleanup(idp.Close)

	s := start(t, setup{noop: true, mutate: func(c *config.Config) {
		c.Auth.PublicKeys = []string{pemFile}
		c.Auth.JWKSURL = idp.URL
		c.Auth.UnknownKIDIntervalSeconds = 3600
	}})
	now := time.Now()
	sign := func(key *rsa.PrivateKey, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": "execgate", "aud": "execgate", "sub": "alice",
			"tenant_id": "demo", "roles": []string{"executor"}, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		out, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	body := `{"source":"def run(args, context):\n    return 1\n"}`
	if r := s.execute(sign(idpKey, "rs-1"), body); r.status != 200 {
		t.Fatalf("the JWKS key's token: %d %s", r.status, r.body)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the first JWKS fetch", func() bool { return fetches.Load() >= 1 })
	before := fetches.Load()

	for _, tc := range []struct {
		name, kid string
		key       *rsa.PrivateKey
		want      string
		fetched   int64
	}{
		{"the first unknown kid triggers a refresh and says so", "rotated-2", idpKey,
			`unknown key id (kid) "rotated-2": not in the JWKS after a refresh`, 1},
		{"a second unknown kid inside the interval says the refresh was skipped", "rotated-3", stranger,
			`unknown key id (kid) "rotated-3": not in the JWKS (no refresh: the last unknown-kid refresh was less than 3600s ago)`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.execute(sign(tc.key, tc.kid), body)
			var env struct {
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(r.body, &env); err != nil {
				t.Fatal(err)
			}
			if r.status != 401 || env.Error.Type != "Unauthenticated" || env.Error.Message != tc.want {
				t.Fatalf("got %d %s %q, want 401 Unauthenticated %q", r.status, env.Error.Type, env.Error.Message, tc.want)
			}
			if got := fetches.Load() - before; got != tc.fetched {
				t.Fatalf("%d JWKS fetches since the good token, want %d", got, tc.fetched)
			}
		})
	}
	// A kid the JWKS does not hold may still name a configured PEM key's
	// token: it verifies.
	if r := s.execute(sign(pemKey, "partner-1"), body); r.status != 200 {
		t.Fatalf("the PEM key's token: %d %s", r.status, r.body)
	}
}
