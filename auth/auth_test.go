package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/execgate/execgate/internal/testenv"
)

// now is the fixed instant every test token is checked at.
var now = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func fixedNow() time.Time { return now }

// keys holds one key of every supported type, generated once.
type keys struct {
	hmac    []byte
	hmacF   string
	rsa     *rsa.PrivateKey
	rsaPEM  string // file path
	rsaPEMb []byte // the public key PEM bytes (the HS/RS confusion secret)
	ec      *ecdsa.PrivateKey
	ecPEM   string
	ed      ed25519.PrivateKey
	edPEM   string
	other   *rsa.PrivateKey // not configured anywhere
}

var (
	keysOnce sync.Once
	testKeys keys
)

func writePub(t *testing.T, dir, name string, pub crypto.PublicKey) (string, []byte) {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func getKeys(t *testing.T) keys {
	t.Helper()
	keysOnce.Do(func() {
		var err error
		k := &testKeys
		if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if k.other, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
		if _, k.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
			panic(err)
		}
		k.hmac = []byte(strings.Repeat("k", 64))
	})
	k := testKeys
	dir := t.TempDir()
	k.hmacF = filepath.Join(dir, "dev.key")
	if err := os.WriteFile(k.hmacF, append(append([]byte(nil), k.hmac...), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	k.rsaPEM, k.rsaPEMb = writePub(t, dir, "rsa.pem", &k.rsa.PublicKey)
	k.ecPEM, _ = writePub(t, dir, "ec.pem", &k.ec.PublicKey)
	k.edPEM, _ = writePub(t, dir, "ed.pem", k.ed.Public())
	return k
}

// claims returns valid claims at now; mutate to break them.
func claims() jwt.MapClaims {
	return jwt.MapClaims{
		"iss":       "execgate",
		"aud":       "execgate",
		"sub":       "alice",
		"tenant_id": "acme",
		"roles":     []string{"executor"},
		"iat":       now.Add(-time.Minute).Unix(),
		"exp":       now.Add(time.Hour).Unix(),
	}
}

func sign(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// critReason is the refusal of a token whose header has crit.
const critReason = `the token's header lists critical extensions ("crit"), none of which are understood`

// signCrit signs like sign with a crit header parameter listing crit.
func signCrit(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims, kid string, crit []string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	tok.Header["crit"] = crit
	for _, name := range crit {
		tok.Header[name] = true
	}
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unsigned builds an "alg: <alg>" token with an empty signature.
func unsigned(alg string, c jwt.MapClaims) string {
	h, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	p, _ := json.Marshal(c)
	enc := base64.RawURLEncoding.EncodeToString
	return enc(h) + "." + enc(p) + "."
}

// tamper swaps the payload of a signed token, keeping its signature.
func tamper(t *testing.T, tok string, c jwt.MapClaims) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	p, _ := json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(p)
	return strings.Join(parts, ".")
}

// jwksServer serves a JWK Set that the test can rotate, counting fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex // guards set
	set     []byte
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(s.set)
	}))
	t.Cleanup(s.Close)
	return s
}

// publish replaces the served set with these public keys by kid.
func (s *jwksServer) publish(t *testing.T, pubs map[string]any) {
	t.Helper()
	b := testenv.JWKSet(t, pubs)
	s.mu.Lock()
	s.set = b
	s.mu.Unlock()
}

func newVerifier(t *testing.T, cfg Config) *Verifier {
	t.Helper()
	if cfg.Issuer == "" {
		cfg.Issuer, cfg.Audience = "execgate", "execgate"
	}
	if cfg.LeewaySeconds == 0 {
		cfg.LeewaySeconds = 30
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := NewVerifier(ctx, cfg, Options{Now: fixedNow})
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func TestVerifyRefusesAttacksAndAcceptsGoodTokens(t *testing.T) {
	k := getKeys(t)
	jw := newJWKSServer(t)
	jw.publish(t, map[string]any{"ec-1": &k.ec.PublicKey})

	devOnly := Config{HS256SecretFile: k.hmacF}
	pemOnly := Config{PublicKeys: []string{k.rsaPEM, k.edPEM}}
	devAndPEM := Config{HS256SecretFile: k.hmacF, PublicKeys: []string{k.rsaPEM}}
	jwksOnly := Config{JWKSURL: jw.URL, UnknownKIDIntervalSeconds: 3600}
	jwksAndPEM := Config{JWKSURL: jw.URL, UnknownKIDIntervalSeconds: 3600, PublicKeys: []string{k.rsaPEM}}

	mod := func(f func(jwt.MapClaims)) jwt.MapClaims { c := claims(); f(c); return c }

	tests := []struct {
		name   string
		cfg    Config
		token  func(t *testing.T) string
		reason string // "" means the token must verify
	}{
		{"a good HS256 dev token verifies", devOnly,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodHS256, k.hmac, claims(), "") }, ""},
		{"a good RS256 token verifies with the PEM key", pemOnly,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodRS256, k.rsa, claims(), "") }, ""},
		{"a good EdDSA token verifies with the PEM key", pemOnly,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodEdDSA, k.ed, claims(), "") }, ""},
		{"a good ES256 token verifies through the JWKS", jwksOnly,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodES256, k.ec, claims(), "ec-1") }, ""},
		{"an exp inside the leeway still verifies", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["exp"] = now.Add(-10 * time.Second).Unix() }), "")
			}, ""},

		{"alg none is refused", devOnly, func(*testing.T) string { return unsigned("none", claims()) }, `algorithm "none" not allowed`},
		{"alg None is refused", devOnly, func(*testing.T) string { return unsigned("None", claims()) }, `algorithm "None" not allowed`},
		{"alg NONE is refused", devOnly, func(*testing.T) string { return unsigned("NONE", claims()) }, `algorithm "NONE" not allowed`},
		{"alg nOnE is refused", pemOnly, func(*testing.T) string { return unsigned("nOnE", claims()) }, `algorithm "nOnE" not allowed`},
		{"HS256 keyed with the RSA public key is refused when only PEM keys are configured", pemOnly,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodHS256, k.rsaPEMb, claims(), "") }, `algorithm "HS256" not allowed`},
		{"HS256 keyed with the RSA public key is refused next to a dev key", devAndPEM,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodHS256, k.rsaPEMb, claims(), "") }, "invalid signature"},
		{"HS256 keyed with the RSA public key is refused with a JWKS", jwksOnly,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodHS256, k.rsaPEMb, claims(), "ec-1") }, `algorithm "HS256" not allowed`},
		{"RS256 by an unknown key is refused", pemOnly,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodRS256, k.other, claims(), "") }, "invalid signature"},
		{"an expired token is refused", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() }), "")
			}, "token expired"},
		{"nbf in the future is refused", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() }), "")
			}, "token not valid yet (nbf)"},
		{"iat in the future is refused", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["iat"] = now.Add(time.Hour).Unix() }), "")
			}, "token issued in the future (iat)"},
		{"a missing exp is refused", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { delete(c, "exp") }), "")
			}, "token is missing a required claim (exp, iss or aud)"},
		{"a wrong iss is refused", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["iss"] = "evil" }), "")
			}, "wrong issuer"},
		{"a wrong aud is refused", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["aud"] = "other" }), "")
			}, "wrong audience"},
		{"a missing tenant_id is refused", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { delete(c, "tenant_id") }), "")
			}, "token has no tenant_id claim"},
		{"a tampered payload is refused", devOnly,
			func(t *testing.T) string {
				good := sign(t, jwt.SigningMethodHS256, k.hmac, claims(), "")
				return tamper(t, good, mod(func(c jwt.MapClaims) { c["tenant_id"] = "victim" }))
			}, "invalid signature"},
		{"an unknown kid is refused", jwksOnly,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodRS256, k.other, claims(), "nobody") },
			`unknown key id (kid) "nobody": not in the JWKS after a refresh`},
		{"an unknown kid is refused as unknown next to a PEM key of its algorithm", jwksAndPEM,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodRS256, k.other, claims(), "nobody") },
			`unknown key id (kid) "nobody": not in the JWKS after a refresh`},
		{"a PEM key's token with a kid the JWKS lacks still verifies", jwksAndPEM,
			func(t *testing.T) string { return sign(t, jwt.SigningMethodRS256, k.rsa, claims(), "partner") }, ""},
		{"a JWKS key cannot verify another algorithm", jwksOnly,
			func(t *testing.T) string {
				// ES256 key published, token claims RS256 with its kid.
				return sign(t, jwt.SigningMethodRS256, k.rsa, claims(), "ec-1")
			}, "token cannot be verified (algorithm not allowed or no matching key)"},
		{"a crit header is refused (HS256 dev key)", devOnly,
			func(t *testing.T) string {
				return signCrit(t, jwt.SigningMethodHS256, k.hmac, claims(), "", []string{"exp"})
			}, critReason},
		{"a crit header is refused (PEM key)", pemOnly,
			func(t *testing.T) string {
				return signCrit(t, jwt.SigningMethodRS256, k.rsa, claims(), "", []string{"b64"})
			}, critReason},
		{"a crit header is refused (JWKS)", jwksOnly,
			func(t *testing.T) string {
				return signCrit(t, jwt.SigningMethodES256, k.ec, claims(), "ec-1", []string{})
			}, critReason},
		{"an exp given as a string is refused (HS256 dev key)", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["exp"] = fmt.Sprint(now.Add(time.Hour).Unix()) }), "")
			}, "claim exp is not a NumericDate (a JSON number of seconds)"},
		{"an nbf given as a string is refused (PEM key)", pemOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodEdDSA, k.ed, mod(func(c jwt.MapClaims) { c["nbf"] = fmt.Sprint(now.Add(-time.Hour).Unix()) }), "")
			}, "claim nbf is not a NumericDate (a JSON number of seconds)"},
		{"an iat given as a string is refused (JWKS)", jwksOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodES256, k.ec, mod(func(c jwt.MapClaims) { c["iat"] = fmt.Sprint(now.Add(-time.Minute).Unix()) }), "ec-1")
			}, "claim iat is not a NumericDate (a JSON number of seconds)"},
		{"an exp of null is refused", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["exp"] = nil }), "")
			}, "claim exp is not a NumericDate (a JSON number of seconds)"},
		{"a fractional exp still verifies", devOnly,
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS256, k.hmac, mod(func(c jwt.MapClaims) { c["exp"] = float64(now.Add(time.Hour).Unix()) + 0.5 }), "")
			}, ""},
		{"garbage is refused", devOnly, func(*testing.T) string { return "not.a.jwt" }, "malformed token"},
		{"an empty token is refused", devOnly, func(*testing.T) string { return "" }, "missing bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVerifier(t, tt.cfg)
			c, err := v.Verify(context.Background(), tt.token(t))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if c.TenantID != "acme" || c.Subject != "alice" || len(c.Roles) != 1 || c.Roles[0] != "executor" {
					t.Fatalf("claims = %+v", c)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify accepted the token; want refusal %q", tt.reason)
			}
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v does not match ErrUnauthenticated", err)
			}
			var ae *Error
			if !errors.As(err, &ae) || ae.Reason != tt.reason {
				t.Fatalf("reason = %q, want %q (err %v)", ae.Reason, tt.reason, err)
			}
		})
	}
}

func TestJWKSRotationRefreshesOnceForAnUnknownKid(t *testing.T) {
	k := getKeys(t)
	jw := newJWKSServer(t)
	jw.publish(t, map[string]any{"old": &k.rsa.PublicKey})
	v := newVerifier(t, Config{JWKSURL: jw.URL, UnknownKIDIntervalSeconds: 3600})
	ctx := context.Background()
	if _, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.rsa, claims(), "old")); err != nil {
		t.Fatalf("old key: %v", err)
	}
	before := jw.fetches.Load()

	// The IdP rotates: new key published, old one removed.
	jw.publish(t, map[string]any{"new": &k.other.PublicKey})
	if _, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.other, claims(), "new")); err != nil {
		t.Fatalf("rotated key was not picked up: %v", err)
	}
	if got := jw.fetches.Load() - before; got != 1 {
		t.Fatalf("unknown kid caused %d fetches, want 1", got)
	}
	// The old key is revoked with the refresh.
	if _, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.rsa, claims(), "old")); err == nil {
		t.Fatal("token signed by the removed key still verifies")
	}
	// A spray of unknown kids inside the interval costs no fetch and never blocks.
	start := time.Now()
	for i := 0; i < 20; i++ {
		_, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.other, claims(), "spray"))
		if !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("spray %d: err = %v", i, err)
		}
	}
	if got := jw.fetches.Load() - before; got != 1 {
		t.Fatalf("unknown-kid spray caused %d fetches in total, want 1", got)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("unknown-kid spray took %s; refusals must not wait for the limiter", d)
	}
}

func TestNewVerifierRejectsBadConfig(t *testing.T) {
	k := getKeys(t)
	dir := t.TempDir()
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("tiny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "x.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no key at all", Config{}, "configure hs256_secret_file, public_keys or jwks_url"},
		{"a short dev key", Config{HS256SecretFile: short}, "want at least 32"},
		{"a missing dev key", Config{HS256SecretFile: filepath.Join(dir, "nope")}, "reading auth.hs256_secret_file"},
		{"a file that is not PEM", Config{PublicKeys: []string{notPEM}}, "no PEM block"},
		{"plain http JWKS off loopback", Config{JWKSURL: "http://idp.example/jwks.json"}, "must be https"},
		{"a relative JWKS URL", Config{JWKSURL: "jwks.json"}, "is not a URL"},
		{"a good config", Config{HS256SecretFile: k.hmacF, PublicKeys: []string{k.ecPEM}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Issuer, tt.cfg.Audience = "execgate", "execgate"
			_, err := NewVerifier(context.Background(), tt.cfg, Options{})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("NewVerifier: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestMintedTokensVerify(t *testing.T) {
	k := getKeys(t)
	cfg := Config{Issuer: "execgate", Audience: "execgate", HS256SecretFile: k.hmacF, LeewaySeconds: 30}
	s, err := NewSigner(cfg, fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Mint(Claims{Subject: "cli", TenantID: "demo", Roles: []string{"executor", "admin"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, cfg)
	c, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatalf("Verify minted token: %v", err)
	}
	if c.TenantID != "demo" || c.Subject != "cli" || len(c.Roles) != 2 || !c.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("claims = %+v", c)
	}

	if _, err := NewSigner(Config{Issuer: "execgate", Audience: "execgate", PublicKeys: []string{k.rsaPEM}}, nil); !errors.Is(err, ErrNoSigningKey) {
		t.Fatalf("NewSigner with only public keys: err = %v, want ErrNoSigningKey", err)
	}
	for _, ttl := range []time.Duration{0, -time.Second, MaxTTL + time.Second} {
		if _, err := s.Mint(Claims{TenantID: "demo"}, ttl); err == nil {
			t.Errorf("Mint accepted ttl %s", ttl)
		}
	}
	if _, err := s.Mint(Claims{Subject: "x"}, time.Hour); err == nil {
		t.Error("Mint accepted a token without tenant")
	}
}
