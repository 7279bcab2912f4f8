package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/execgate/execgate/internal/pemkey"
)

// ErrUnauthenticated is matched (errors.Is) by every verification failure.
// The gateway maps it to 401 Unauthenticated.
var ErrUnauthenticated = errors.New("unauthenticated")

// Error says why a token was refused. Reason is one line, safe to show the
// caller (it never contains the token or key material).
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return "unauthenticated: " + e.Reason + ": " + e.Err.Error()
	}
	return "unauthenticated: " + e.Reason
}

// Unwrap returns the underlying jwt error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnauthenticated) true.
func (e *Error) Is(target error) bool { return target == ErrUnauthenticated }

// Claims are the verified claims execgate uses (DESIGN §5).
type Claims struct {
	Subject   string
	TenantID  string
	Roles     []string
	Issuer    string
	ID        string    // jti, may be empty
	ExpiresAt time.Time // always set on a verified token (exp is required)
}

// tokenClaims is the wire form of the claims.
type tokenClaims struct {
	jwt.RegisteredClaims
	TenantID string   `json:"tenant_id"`
	Roles    []string `json:"roles"`
}

// numericDateClaims are the claims RFC 7519 §2 defines as NumericDate.
var numericDateClaims = [...]string{"exp", "nbf", "iat"}

// errNotNumericDate: a NumericDate claim that is not a JSON number.
type errNotNumericDate struct{ claim string }

func (e *errNotNumericDate) Error() string {
	return "claim " + e.claim + " is not a NumericDate (a JSON number of seconds)"
}

// UnmarshalJSON refuses exp, nbf or iat given as anything but a JSON
// number (RFC 7519 §2 NumericDate). golang-jwt/v5's NumericDate decodes
// through json.Number, which also accepts a string such as "1999999999";
// a token whose issuer wrote its dates as strings is not one we verify.
func (c *tokenClaims) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for _, name := range numericDateClaims {
		v, ok := raw[name]
		if !ok {
			continue
		}
		if len(v) == 0 || !(v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
			return &errNotNumericDate{claim: name}
		}
	}
	type plain tokenClaims // without this method
	return json.Unmarshal(b, (*plain)(c))
}

// errCrit: the token's JOSE header has a crit parameter. execgate
// understands no JWS extensions, so RFC 7515 §4.1.11 says reject.
var errCrit = errors.New(`the token's header lists critical extensions ("crit"), none of which are understood`)

// Signing algorithms, pinned per key type: a key only ever verifies tokens
// of its own algorithm, so HS/RS confusion cannot happen.
const (
	algHS256 = "HS256" // dev key only
	algRS256 = "RS256" // RSA public keys
	algES256 = "ES256" // EC P-256 public keys
	algEdDSA = "EdDSA" // Ed25519 public keys
)

// staticKey is one configured verification key with its pinned algorithm.
type staticKey struct {
	alg    string
	key    any // []byte for HS256, else a crypto.PublicKey
	source string
}

// Options are the injectable parts of a Verifier.
type Options struct {
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
	// HTTPClient fetches the JWKS. Default: a client with a 10 s timeout.
	HTTPClient *http.Client
}

// Verifier verifies bearer tokens. It is safe for concurrent use; the JWKS
// (if configured) is refreshed in the background until the ctx given to
// NewVerifier is done.
type Verifier struct {
	parser  *jwt.Parser
	static  []staticKey
	jwks    keyfunc.Keyfunc // nil without jwks_url
	jwksRaw jwkset.Storage  // the JWKS cache without unknown-kid refresh
	unknown *rate.Limiter   // gates unknown-kid refreshes; never waited on
	// unknownEvery is the unknown-kid refresh interval (for refusals).
	unknownEvery time.Duration
	algs         map[string]bool // the configured algorithms
	issuer       string
	audience     string
}

// NewVerifier loads the configured keys. At least one of hs256_secret_file,
// public_keys or jwks_url must be set.
func NewVerifier(ctx context.Context, cfg Config, opts Options) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	v := &Verifier{issuer: cfg.Issuer, audience: cfg.Audience}
	algs := map[string]bool{}
	if cfg.HS256SecretFile != "" {
		key, err := ReadHMACKey(cfg.HS256SecretFile)
		if err != nil {
			return nil, err
		}
		v.static = append(v.static, staticKey{alg: algHS256, key: key, source: cfg.HS256SecretFile})
		algs[algHS256] = true
	}
	for _, path := range cfg.PublicKeys {
		k, err := readPublicKey(path)
		if err != nil {
			return nil, err
		}
		v.static = append(v.static, k)
		algs[k.alg] = true
	}
	if cfg.JWKSURL != "" {
		if err := v.setupJWKS(ctx, cfg, opts); err != nil {
			return nil, err
		}
		algs[algRS256], algs[algES256], algs[algEdDSA] = true, true, true
	}
	if len(algs) == 0 {
		return nil, errors.New("auth: configure hs256_secret_file, public_keys or jwks_url")
	}
	v.algs = algs
	methods := make([]string, 0, len(algs))
	for _, a := range []string{algHS256, algRS256, algES256, algEdDSA} {
		if algs[a] {
			methods = append(methods, a)
		}
	}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods(methods),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(time.Duration(cfg.LeewaySeconds)*time.Second),
		jwt.WithTimeFunc(opts.Now),
	)
	return v, nil
}

func (v *Verifier) setupJWKS(ctx context.Context, cfg Config, opts Options) error {
	u, err := url.Parse(cfg.JWKSURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("auth.jwks_url: %q is not a URL", cfg.JWKSURL)
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname())) {
		return fmt.Errorf("auth.jwks_url: %q must be https (plain http only on loopback)", cfg.JWKSURL)
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	d := cfg.WithDefaults()
	refresh, unknown := d.JWKSRefreshSeconds, d.UnknownKIDIntervalSeconds
	raw, err := jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    client,
		Ctx:                       ctx,
		HTTPTimeout:               10 * time.Second,
		NoErrorReturnFirstHTTPReq: true, // the IdP may be down at start; keys arrive on refresh
		RefreshInterval:           time.Duration(refresh) * time.Second,
	})
	if err != nil {
		return fmt.Errorf("auth.jwks_url: %w", err)
	}
	// The client refreshes on an unknown kid without its own limit (rate.Inf):
	// Verify only gets that far after v.unknown allowed it, so an attacker
	// spraying kids costs at most one fetch per interval and never blocks.
	store, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{cfg.JWKSURL: raw},
		RefreshUnknownKID: rate.NewLimiter(rate.Inf, 1),
	})
	if err != nil {
		return fmt.Errorf("auth.jwks_url: %w", err)
	}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: store, UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}})
	if err != nil {
		return fmt.Errorf("auth.jwks_url: %w", err)
	}
	v.jwks, v.jwksRaw = kf, raw
	v.unknownEvery = time.Duration(unknown) * time.Second
	v.unknown = rate.NewLimiter(rate.Every(v.unknownEvery), 1)
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Verify checks a bearer token and returns its claims. Every failure is an
// *Error (errors.Is ErrUnauthenticated).
func (v *Verifier) Verify(ctx context.Context, raw string) (Claims, error) {
	if raw == "" {
		return Claims{}, &Error{Reason: "missing bearer token"}
	}
	var tc tokenClaims
	var kl kidLookup
	tok, err := v.parser.ParseWithClaims(raw, &tc, func(t *jwt.Token) (any, error) { return v.keyFor(ctx, t, &kl) })
	if err != nil {
		if tok != nil && !errors.Is(err, jwt.ErrTokenMalformed) {
			if alg, _ := tok.Header["alg"].(string); !v.algs[alg] {
				return Claims{}, &Error{Reason: fmt.Sprintf("algorithm %q not allowed", alg), Err: err}
			}
		}
		// A kid the JWKS does not hold, and no static key verified the
		// token either: the key is unknown, not the signature bad.
		if kl.unknown && (errors.Is(err, errUnknownKID) || errors.Is(err, jwt.ErrTokenSignatureInvalid)) {
			return Claims{}, &Error{Reason: kl.reason(v.unknownEvery), Err: err}
		}
		return Claims{}, &Error{Reason: reasonFor(err), Err: err}
	}
	if tc.TenantID == "" {
		return Claims{}, &Error{Reason: "token has no tenant_id claim"}
	}
	c := Claims{
		Subject:  tc.Subject,
		TenantID: tc.TenantID,
		Roles:    tc.Roles,
		Issuer:   tc.Issuer,
		ID:       tc.ID,
	}
	if tc.ExpiresAt != nil {
		c.ExpiresAt = tc.ExpiresAt.Time
	}
	return c, nil
}

// errUnknownKID is returned by the key lookup for a kid nobody knows.
var errUnknownKID = errors.New("unknown kid")

// kidLookup records, for one Verify, what the JWKS said about the token's
// kid, so the refusal can say "unknown key id" (and whether the JWKS was
// re-fetched) rather than what a static key's check said.
type kidLookup struct {
	kid       string
	unknown   bool // the JWKS (after any refresh) does not hold kid
	refreshed bool // an unknown-kid refresh was made for this token
}

// maxKIDInReason caps the caller-chosen kid echoed in a refusal.
const maxKIDInReason = 64

func (k kidLookup) reason(every time.Duration) string {
	kid := k.kid
	if len(kid) > maxKIDInReason {
		kid = kid[:maxKIDInReason] + "…"
	}
	if k.refreshed {
		return fmt.Sprintf("unknown key id (kid) %q: not in the JWKS after a refresh", kid)
	}
	return fmt.Sprintf("unknown key id (kid) %q: not in the JWKS (no refresh: the last unknown-kid refresh was less than %s ago)",
		kid, strconv.FormatFloat(every.Seconds(), 'f', -1, 64)+"s")
}

// errNoKey is returned when no configured key has the token's algorithm.
var errNoKey = errors.New("no key for this algorithm")

// keyFor picks the verification keys for t: only keys whose pinned
// algorithm equals the token's (the parser has already refused algorithms
// outside the configured set, including every casing of "none").
// kl records what the JWKS said about the token's kid.
func (v *Verifier) keyFor(ctx context.Context, t *jwt.Token, kl *kidLookup) (any, error) {
	// Before any key is looked up (or a JWKS refresh triggered): a header
	// with crit, whatever it lists, is refused.
	if _, ok := t.Header["crit"]; ok {
		return nil, errCrit
	}
	alg := t.Method.Alg()
	kid, hasKID := t.Header["kid"].(string)
	if hasKID && v.jwks != nil && alg != algHS256 {
		key, err := v.jwksKey(ctx, t, kid, kl)
		if err == nil {
			return key, nil
		}
		if !errors.Is(err, errUnknownKID) {
			return nil, err
		}
		// Not in the JWKS: a statically configured key may still match.
	}
	var set jwt.VerificationKeySet
	for _, k := range v.static {
		if k.alg == alg {
			set.Keys = append(set.Keys, k.key)
		}
	}
	if len(set.Keys) == 0 && v.jwks != nil && !hasKID {
		keys, err := v.jwks.VerificationKeySet(ctx)
		if err != nil {
			return nil, err
		}
		for _, k := range keys.Keys {
			if algOfKey(k) == alg {
				set.Keys = append(set.Keys, k)
			}
		}
	}
	switch {
	case len(set.Keys) > 0:
		return set, nil
	case hasKID && v.jwks != nil:
		return nil, errUnknownKID
	default:
		return nil, errNoKey
	}
}

// jwksKey looks kid up in the JWKS, refreshing on an unknown kid at most
// once per UnknownKIDIntervalSeconds, and checks the key's type pins alg.
func (v *Verifier) jwksKey(ctx context.Context, t *jwt.Token, kid string, kl *kidLookup) (any, error) {
	kl.kid = kid
	if _, err := v.jwksRaw.KeyRead(ctx, kid); errors.Is(err, jwkset.ErrKeyNotFound) {
		if !v.unknown.Allow() {
			kl.unknown = true
			return nil, errUnknownKID
		}
		kl.refreshed = true // the keyfunc below re-fetches for an unknown kid
	}
	key, err := v.jwks.KeyfuncCtx(ctx)(t)
	if err != nil {
		if errors.Is(err, jwkset.ErrKeyNotFound) {
			kl.unknown = true
			return nil, errUnknownKID
		}
		return nil, err
	}
	if algOfKey(key) != t.Method.Alg() {
		return nil, fmt.Errorf("key %q does not verify %s", kid, t.Method.Alg())
	}
	return key, nil
}

// algOfKey is the one algorithm a key may verify.
func algOfKey(k any) string {
	switch k := k.(type) {
	case []byte:
		return algHS256
	case *rsa.PublicKey:
		return algRS256
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return algES256
		}
	case ed25519.PublicKey:
		return algEdDSA
	}
	return ""
}

// reasonFor turns a parse error into a short reason for the caller.
func reasonFor(err error) string {
	var nd *errNotNumericDate
	switch {
	case errors.As(err, &nd):
		return nd.Error()
	case errors.Is(err, errCrit):
		return errCrit.Error()
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "invalid signature"
	case errors.Is(err, errUnknownKID):
		return "unknown key id (kid)"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "token cannot be verified (algorithm not allowed or no matching key)"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token issued in the future (iat)"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "token is missing a required claim (exp, iss or aud)"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong audience"
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return "invalid claims"
	default:
		return "invalid token"
	}
}

// ReadHMACKey reads the HS256 dev key: the file's bytes with one trailing
// newline trimmed. It must hold at least 32 bytes (RFC 7518 §3.2).
func ReadHMACKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading auth.hs256_secret_file: %w", err)
	}
	b = []byte(strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"))
	if len(b) < 32 {
		return nil, fmt.Errorf("auth.hs256_secret_file %s: key is %d bytes, want at least 32", path, len(b))
	}
	return b, nil
}

// readPublicKey loads one PEM public key (PKIX "PUBLIC KEY", PKCS#1 "RSA
// PUBLIC KEY" or a certificate) and pins its algorithm by type.
func readPublicKey(path string) (staticKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return staticKey{}, fmt.Errorf("reading auth.public_keys: %w", err)
	}
	pub, err := pemkey.Parse(b)
	if err != nil {
		return staticKey{}, fmt.Errorf("auth.public_keys %s: %w", path, err)
	}
	alg := algOfKey(pub)
	if alg == "" {
		return staticKey{}, fmt.Errorf("auth.public_keys %s: unsupported key type %T (want RSA, EC P-256 or Ed25519)", path, pub)
	}
	if rk, ok := pub.(*rsa.PublicKey); ok && rk.N.BitLen() < 2048 {
		return staticKey{}, fmt.Errorf("auth.public_keys %s: RSA key is %d bits, want at least 2048", path, rk.N.BitLen())
	}
	return staticKey{alg: alg, key: pub, source: path}, nil
}
