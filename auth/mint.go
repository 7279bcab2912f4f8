package auth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrNoSigningKey means no dev HS256 key is configured: tokens must come
// from the identity provider whose public keys or JWKS are configured.
var ErrNoSigningKey = errors.New("no dev signing key configured (auth.hs256_secret_file); with only public_keys or jwks_url, tokens come from your identity provider")

// MaxTTL bounds minted dev tokens.
const MaxTTL = 30 * 24 * time.Hour

// Signer mints HS256 dev tokens with the configured dev key.
type Signer struct {
	key      []byte
	issuer   string
	audience string
	now      func() time.Time
}

// NewSigner loads the dev key. It returns ErrNoSigningKey when only public
// keys or a JWKS are configured. now may be nil (time.Now).
func NewSigner(cfg Config, now func() time.Time) (*Signer, error) {
	if cfg.HS256SecretFile == "" {
		return nil, ErrNoSigningKey
	}
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("auth: issuer and audience must be set")
	}
	key, err := ReadHMACKey(cfg.HS256SecretFile)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Signer{key: key, issuer: cfg.Issuer, audience: cfg.Audience, now: now}, nil
}

// Mint signs a token for c (Subject, TenantID, Roles) valid for ttl.
func (s *Signer) Mint(c Claims, ttl time.Duration) (string, error) {
	if c.TenantID == "" {
		return "", errors.New("minting token: tenant is required")
	}
	if ttl <= 0 || ttl > MaxTTL {
		return "", fmt.Errorf("minting token: ttl %s is outside (0, %s]", ttl, MaxTTL)
	}
	jti := make([]byte, 12)
	if _, err := rand.Read(jti); err != nil {
		return "", fmt.Errorf("minting token: %w", err)
	}
	now := s.now().Truncate(time.Second)
	tc := tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.issuer,
			Subject:   c.Subject,
			Audience:  jwt.ClaimStrings{s.audience},
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			NotBefore: jwt.NewNumericDate(now),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        hex.EncodeToString(jti),
		},
		TenantID: c.TenantID,
		Roles:    c.Roles,
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, tc).SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("minting token: %w", err)
	}
	return tok, nil
}
