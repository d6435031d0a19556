package kafkalog

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Every Kafka client of the ledger (the writers, the projector's and the
// sink's readers, topic bootstrap, offset queries, replay) reaches the
// brokers through [Config.Dialer] or [Config.Transport], so TLS and SASL
// configured once apply to all of them.

// Dialer is the kafka-go dialer of c's readers, with c's TLS and SASL.
func (c Config) Dialer() *kafka.Dialer {
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: c.TLS, SASLMechanism: c.SASL}
}

// Transport is the kafka-go transport of c's writers and admin clients,
// with c's TLS and SASL.
func (c Config) Transport() kafka.RoundTripper {
	if c.TLS == nil && c.SASL == nil {
		return kafka.DefaultTransport
	}
	return &kafka.Transport{
		Dial:        (&kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}).DialFunc,
		DialTimeout: 10 * time.Second,
		IdleTimeout: 30 * time.Second,
		MetadataTTL: 6 * time.Second,
		TLS:         c.TLS,
		SASL:        c.SASL,
	}
}

// Security is how the ledger authenticates to Kafka and encrypts the
// connection: what the command line and the environment configure.
type Security struct {
	// TLS turns on TLS to the brokers. It is implied by any of the files.
	TLS bool
	// CAFile is a PEM bundle of the CAs that sign the brokers'
	// certificates; empty means the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key, for
	// brokers that require mutual TLS.
	CertFile, KeyFile string
	// ServerName overrides the name the brokers' certificates are checked
	// against; empty means the host of the address dialled.
	ServerName string
	// SASLMechanism is SCRAM-SHA-256 or SCRAM-SHA-512; empty means no SASL.
	SASLMechanism string
	// Username and Password are the SCRAM credentials.
	Username, Password string
}

// Apply sets c's TLS and SASL from s, reporting every problem at once.
func (s Security) Apply(c *Config) error {
	var errs []error
	if s.TLS || s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" || s.ServerName != "" {
		cfg, err := s.tlsConfig()
		if err != nil {
			errs = append(errs, err)
		}
		c.TLS = cfg
	}
	if s.SASLMechanism != "" || s.Username != "" || s.Password != "" {
		m, err := NewSCRAM(s.SASLMechanism, s.Username, s.Password)
		if err != nil {
			errs = append(errs, err)
		}
		c.SASL = m
	}
	return errors.Join(errs...)
}

func (s Security) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
	var errs []error
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("kafkalog: TLS CA file: %w", err))
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("kafkalog: TLS CA file %s holds no PEM certificate", s.CAFile))
			}
			cfg.RootCAs = pool
		}
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		errs = append(errs, errors.New("kafkalog: a TLS client certificate needs both the certificate and the key file"))
	} else if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("kafkalog: TLS client certificate: %w", err))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, errors.Join(errs...)
}

// NewSCRAM returns the SASL/SCRAM mechanism named (SCRAM-SHA-256 or
// SCRAM-SHA-512) with the given credentials.
func NewSCRAM(mechanism, username, password string) (sasl.Mechanism, error) {
	var algo scram.Algorithm
	switch strings.ToUpper(mechanism) {
	case "SCRAM-SHA-256":
		algo = scram.SHA256
	case "SCRAM-SHA-512":
		algo = scram.SHA512
	case "":
		return nil, errors.New("kafkalog: SASL credentials given without a mechanism: want SCRAM-SHA-256 or SCRAM-SHA-512")
	default:
		return nil, fmt.Errorf("kafkalog: SASL mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", mechanism)
	}
	if username == "" || password == "" {
		return nil, fmt.Errorf("kafkalog: SASL %s needs a username and a password", algo.Name())
	}
	m, err := scram.Mechanism(algo, username, password)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: SASL %s: %w", algo.Name(), err)
	}
	return m, nil
}
