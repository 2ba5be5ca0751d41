package etcdclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// build returns the client's tls.Config, or nil when no TLS option is set
// (then https endpoints still get TLS with the system roots; see New).
// Errors name the YAML key and the file.
func (t TLSConfig) build() (*tls.Config, error) {
	if !t.enabled() {
		return nil, nil
	}
	if t.InsecureSkipVerify && t.CAFile != "" {
		return nil, errors.New("tls.insecure_skip_verify is set together with tls.ca_file, which it would ignore: drop one")
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
	}
	if t.CAFile != "" {
		pool, err := loadCAs(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return nil, fmt.Errorf("tls.cert_file %s is set without tls.key_file", t.CertFile)
	case t.KeyFile != "" && t.CertFile == "":
		return nil, fmt.Errorf("tls.key_file %s is set without tls.cert_file", t.KeyFile)
	case t.CertFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file %s, tls.key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// loadCAs reads a PEM bundle and requires every block in it to be a
// certificate that parses: a truncated or mixed-up file is an error here,
// not a mysterious "unknown authority" at the first handshake.
func loadCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *fs.PathError names the path
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		n++
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: PEM block %d is %q, want CERTIFICATE", path, n, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: PEM block %d: %w", path, n, err)
		}
		pool.AddCert(cert)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate found", path)
	}
	return pool, nil
}
