package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestTLSConfig: against a writer over TLS that requires client
// certificates signed by its CA, a Client whose Options.TLSConfig trusts
// the writer and holds such a certificate appends; one without a
// certificate, or without trust in the writer's certificate, stores
// nothing. TLSConfig next to HTTPClient, or with an http:// URL, is
// refused by New.
func TestTLSConfig(t *testing.T) {
	w := newWriter(t, nil)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "producers CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	cliKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cliDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "producer"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}, caCert, &cliKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	clientCert := tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}

	producers := x509.NewCertPool()
	producers.AddCert(caCert)
	ts := httptest.NewUnstartedServer(w.ts.Config.Handler)
	ts.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: producers}
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below
	ts.StartTLS()
	t.Cleanup(ts.Close)
	if !strings.HasPrefix(ts.URL, "https://") {
		t.Fatalf("test server at %s", ts.URL)
	}
	writerCA := x509.NewCertPool()
	writerCA.AddCert(ts.Certificate())

	ctx := context.Background()
	for _, c := range []struct {
		what string
		cfg  *tls.Config
	}{
		{"no TLSConfig (system roots)", nil},
		{"no client certificate", &tls.Config{RootCAs: writerCA}},
		{"no trust in the writer's certificate", &tls.Config{Certificates: []tls.Certificate{clientCert}}},
	} {
		cl, _ := newClient(t, ts.URL, Options{TLSConfig: c.cfg, MaxRetries: -1})
		if res, err := cl.Append(ctx, "s0", rows("x"), nil); err == nil {
			t.Fatalf("%s: appended %+v; want the handshake refused", c.what, res)
		} else {
			t.Logf("%s: %v", c.what, err)
		}
	}
	if n := w.memtableRows(t, "s0"); n != 0 {
		t.Fatalf("the refused handshakes stored %d rows", n)
	}

	cfg := &tls.Config{RootCAs: writerCA, Certificates: []tls.Certificate{clientCert}}
	cl, _ := newClient(t, ts.URL, Options{TLSConfig: cfg, Producer: "tls-p"})
	if res, err := cl.Append(ctx, "s0", rows("a", "b"), nil); err != nil || res.Stored != 2 || res.Attempts != 1 {
		t.Fatalf("with the TLSConfig: %+v, %v", res, err)
	}
	if n := w.memtableRows(t, "s0"); n != 2 {
		t.Fatalf("the shard holds %d rows, want the 2 appended over mutual TLS", n)
	}
	if cfg.Certificates == nil || len(cfg.NextProtos) != 0 {
		t.Fatalf("the caller's TLSConfig was changed: NextProtos %q", cfg.NextProtos)
	}

	if _, err := New(ts.URL, Options{TLSConfig: cfg, HTTPClient: http.DefaultClient}); err == nil || !strings.Contains(err.Error(), "TLSConfig and HTTPClient") {
		t.Fatalf("TLSConfig with HTTPClient: %v", err)
	}
	if _, err := New(w.ts.URL, Options{TLSConfig: cfg}); err == nil || !strings.Contains(err.Error(), "not https://") {
		t.Fatalf("TLSConfig with an http:// URL: %v", err)
	}
	if _, err := New(w.ts.URL, Options{}); err != nil {
		t.Fatalf("default options: %v", err)
	}
}
