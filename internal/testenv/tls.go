package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
)

// CA is a certificate authority made for one test: tools in a jail trust it
// only in a rootfs made by RootfsTrusting.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate, PEM-encoded.
	PEM []byte
}

// NewCA makes a CA valid for an hour.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "execgate test CA " + rand.Text()[:8]},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf issues a server certificate for hosts (DNS names).
func (ca *CA) Leaf(t testing.TB, hosts ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: hosts[0]},
		DNSNames:     hosts,
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// RootfsTrusting returns a copy of the shared test rootfs (Rootfs, the
// default runtime's tree) whose CA bundle is caPEM alone, so a tool's TLS
// client in a jail trusts exactly that CA. The copy is hard links of the
// shared tree except for the bundle files, which are replaced (never
// written through), and is removed at cleanup. It is named after the
// default runtime, so its parent directory serves as a
// sandbox.runtimes_dir holding that runtime alone (a gateway's config).
func RootfsTrusting(t testing.TB, caPEM []byte) string {
	t.Helper()
	src := Rootfs(t)
	dir := filepath.Join(JailDir(t), "runtimes", limits.DefaultRuntime)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-al", src, dir).CombinedOutput(); err != nil {
		t.Fatalf("copying the rootfs with links: %v\n%s", err, out)
	}
	for _, p := range []string{jaillayout.CABundlePath, filepath.Join(jaillayout.OpenSSLDir, "cert.pem")} {
		host := filepath.Join(dir, p)
		if err := os.Remove(host); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, caPEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
