package pemkey

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	pkix1, _ := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	pkixEd, _ := x509.MarshalPKIXPublicKey(edPub)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &rsaKey.PublicKey, rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	tests := []struct {
		name    string
		in      []byte
		wantT   string
		wantErr string
	}{
		{"PKIX EC", enc("PUBLIC KEY", pkix1), "*ecdsa.PublicKey", ""},
		{"PKIX Ed25519", enc("PUBLIC KEY", pkixEd), "ed25519.PublicKey", ""},
		{"PKCS1 RSA", enc("RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey)), "*rsa.PublicKey", ""},
		{"certificate", enc("CERTIFICATE", certDER), "*rsa.PublicKey", ""},
		{"private key refused", enc("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), "", `"RSA PRIVATE KEY" is not a public key`},
		{"not PEM", []byte("hello"), "", "no PEM block"},
		{"garbage in a PEM block", enc("PUBLIC KEY", []byte("nope")), "", "asn1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := typeName(k); got != tt.wantT {
				t.Fatalf("key type %s, want %s", got, tt.wantT)
			}
		})
	}
	if _, err := Parse(nil); !errors.Is(err, ErrNoPEM) {
		t.Errorf("empty input: %v, want ErrNoPEM", err)
	}
}

func typeName(k any) string {
	switch k.(type) {
	case *rsa.PublicKey:
		return "*rsa.PublicKey"
	case *ecdsa.PublicKey:
		return "*ecdsa.PublicKey"
	case ed25519.PublicKey:
		return "ed25519.PublicKey"
	}
	return "?"
}
