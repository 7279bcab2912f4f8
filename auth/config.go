// Package auth verifies bearer JWTs (golang-jwt/v5, keyfunc/v3 for JWKS) and
// mints dev tokens. Algorithms are pinned per key, exp is required, iss and
// aud are checked.
package auth

import (
	"errors"
	"fmt"
)

// Config is the auth section of the config file (DESIGN §5, §13).
type Config struct {
	// Issuer is the required iss claim. Default "execgate".
	Issuer string `yaml:"issuer" json:"issuer"`
	// Audience is the required aud claim. Default "execgate".
	Audience string `yaml:"audience" json:"audience"`
	// HS256SecretFile is the dev HMAC key (HS256 only); the file's bytes with
	// one trailing newline trimmed are the key. Empty: none, except in the
	// embedded default, which generates one (0600) in the state dir. A
	// file named <state_dir>/dev.key is generated at start when missing;
	// any other file must exist.
	HS256SecretFile string `yaml:"hs256_secret_file" json:"hs256_secret_file"`
	// PublicKeys are PEM files (RSA → RS256, EC → ES256, Ed25519 → EdDSA).
	// Default none.
	PublicKeys []string `yaml:"public_keys" json:"public_keys"`
	// JWKSURL is fetched and refreshed by keyfunc (unknown-kid refresh is
	// rate-limited). Default none.
	JWKSURL string `yaml:"jwks_url" json:"jwks_url"`
	// LeewaySeconds is the clock skew allowed on exp/nbf/iat. Default 30.
	LeewaySeconds int `yaml:"leeway_seconds" json:"leeway_seconds"`
	// JWKSRefreshSeconds is how often the JWKS is re-fetched in the
	// background. Default 3600 (DefaultJWKSRefreshSeconds).
	JWKSRefreshSeconds int `yaml:"jwks_refresh_seconds" json:"jwks_refresh_seconds"`
	// UnknownKIDIntervalSeconds is the minimum time between JWKS re-fetches
	// triggered by a token whose kid is not known (an unauthenticated caller
	// can send any kid). Tokens arriving while the limiter is empty are
	// refused at once, never queued. Default 30 (DefaultUnknownKIDIntervalSec).
	UnknownKIDIntervalSeconds int `yaml:"unknown_kid_interval_seconds" json:"unknown_kid_interval_seconds"`
}

// Defaults for the JWKS fields of Config, applied by NewVerifier when zero.
const (
	DefaultJWKSRefreshSeconds    = 3600
	DefaultUnknownKIDIntervalSec = 30
)

// WithDefaults returns c with the zero JWKS fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.JWKSRefreshSeconds <= 0 {
		c.JWKSRefreshSeconds = DefaultJWKSRefreshSeconds
	}
	if c.UnknownKIDIntervalSeconds <= 0 {
		c.UnknownKIDIntervalSeconds = DefaultUnknownKIDIntervalSec
	}
	return c
}

// Validate checks the values that need no file or network access (the key
// files and the JWKS are loaded by NewVerifier).
func (c Config) Validate() error {
	var errs []error
	if c.Issuer == "" {
		errs = append(errs, errors.New("auth.issuer: must not be empty"))
	}
	if c.Audience == "" {
		errs = append(errs, errors.New("auth.audience: must not be empty"))
	}
	if c.LeewaySeconds < 0 || c.LeewaySeconds > 300 {
		errs = append(errs, fmt.Errorf("auth.leeway_seconds: %d is outside 0..300", c.LeewaySeconds))
	}
	if c.JWKSRefreshSeconds < 0 {
		errs = append(errs, fmt.Errorf("auth.jwks_refresh_seconds: %d must be >= 0", c.JWKSRefreshSeconds))
	}
	if c.UnknownKIDIntervalSeconds < 0 {
		errs = append(errs, fmt.Errorf("auth.unknown_kid_interval_seconds: %d must be >= 0", c.UnknownKIDIntervalSeconds))
	}
	if c.HS256SecretFile == "" && len(c.PublicKeys) == 0 && c.JWKSURL == "" {
		errs = append(errs, errors.New("auth: configure hs256_secret_file, public_keys or jwks_url"))
	}
	return errors.Join(errs...)
}
