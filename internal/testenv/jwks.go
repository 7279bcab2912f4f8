package testenv

import (
	"context"
	"testing"

	"github.com/MicahParks/jwkset"
)

// JWKSet returns the JSON of a public JWK Set holding pubs by key id, each
// marked for signatures, as an identity provider's JWKS endpoint serves it.
func JWKSet(t testing.TB, pubs map[string]any) []byte {
	t.Helper()
	store := jwkset.NewMemoryStorage()
	for kid, pub := range pubs {
		jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig}})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.KeyWrite(context.Background(), jwk); err != nil {
			t.Fatal(err)
		}
	}
	b, err := store.JSONPublic(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return b
}
