// Package pemkey parses the PEM public keys execgate accepts for JWT
// verification (auth.public_keys) and OPA bundle signatures
// (policy.bundle.verification_key).
package pemkey

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// ErrNoPEM means the input holds no PEM block.
var ErrNoPEM = errors.New("no PEM block")

// Parse returns the public key of the first PEM block: PKIX "PUBLIC KEY",
// PKCS#1 "RSA PUBLIC KEY", or the key of a "CERTIFICATE". Private keys and
// other block types are refused, naming the type.
func Parse(data []byte) (crypto.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, ErrNoPEM
	}
	switch block.Type {
	case "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		return cert.PublicKey, nil
	default:
		return nil, fmt.Errorf("PEM block %q is not a public key or certificate", block.Type)
	}
}
