// Package auth verifies bearer JWTs (golang-jwt/v5, keyfunc/v3 for JWKS) and
// mints dev tokens. Algorithms are pinned per key, exp is required, iss and
// aud are checked.
package auth

// Config is the auth section of the config file (DESIGN §5, §13).
type Config struct {
	// Issuer is the required iss claim. Default "execgate".
	Issuer string `yaml:"issuer" json:"issuer"`
	// Audience is the required aud claim. Default "execgate".
	Audience string `yaml:"audience" json:"audience"`
	// HS256SecretFile is the dev HMAC key (HS256 only); the file's bytes with
	// one trailing newline trimmed are the key. The embedded default
	// generates one (0600) in the state dir.
	HS256SecretFile string `yaml:"hs256_secret_file" json:"hs256_secret_file"`
	// PublicKeys are PEM files (RSA → RS256, EC → ES256, Ed25519 → EdDSA).
	PublicKeys []string `yaml:"public_keys" json:"public_keys"`
	// JWKSURL is fetched and refreshed by keyfunc (unknown-kid refresh is rate-limited).
	JWKSURL string `yaml:"jwks_url" json:"jwks_url"`
	// LeewaySeconds is the clock skew allowed on exp/nbf/iat. Default 30.
	LeewaySeconds int `yaml:"leeway_seconds" json:"leeway_seconds"`
}
