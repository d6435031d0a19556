package stack_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/projector"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files
// and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestSecureEndToEnd runs the stack with HTTPS in front and SCRAM over TLS
// behind: an admin's fact goes in over HTTPS, through the writer, and comes
// out of the projector's reader, all on the broker's SASL_SSL listener.
func TestSecureEndToEnd(t *testing.T) {
	k := testenv.RealSecureKafka(t)
	kc := kafkalog.Config{Brokers: k.SASLSSL, TopicPrefix: k.TopicPrefix, Partitions: 2}
	if err := (kafkalog.Security{CAFile: k.CAFile, SASLMechanism: "SCRAM-SHA-512", Username: k.User, Password: k.Password}).Apply(&kc); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, pool := selfSigned(t)
	s := startAuthStack(t, kc, stack.Options{TLSCertFile: certFile, TLSKeyFile: keyFile})
	if !strings.HasPrefix(s.URL(), "https://") {
		t.Fatalf("got URL %s, want https", s.URL())
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, b := s.do(t, client, http.MethodPost, "/v1/events", "admin", body(t, runEvents("run-tls", 2)))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST over HTTPS: got %d %s", resp.StatusCode, b)
	}
	testenv.CheckFor(t, 30*time.Second, "the projector reads run-tls over SASL_SSL", func() bool {
		runs, err := s.Projector().Runs()
		return err == nil && slices.ContainsFunc(runs, func(r projector.RunInfo) bool { return r.Run == "run-tls" })
	})

	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}}}
	if _, err := old.Get(s.URL() + "/healthz"); err == nil {
		t.Error("a TLS 1.1 client was served; want TLS 1.2 or newer only")
	}
	plain := &http.Client{Transport: &http.Transport{}}
	if _, err := plain.Get(s.URL() + "/healthz"); err == nil {
		t.Error("a client that does not trust the certificate was served")
	}
}
