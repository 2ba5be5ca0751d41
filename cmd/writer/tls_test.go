package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/server"
)

// testPKI is a throwaway CA, a server certificate for 127.0.0.1 that it
// signed, a client certificate it signed and a self-signed client
// certificate, all ECDSA P-256 and valid for an hour, written as PEM files
// into a test's directory.
type testPKI struct {
	caFile, certFile, keyFile string
	// otherKeyFile is a key that is not the server certificate's.
	otherKeyFile string
	ca           *x509.CertPool
	client       tls.Certificate // signed by the CA
	selfSigned   tls.Certificate // signed by nobody the writer trusts
}

func newTestPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	caKey, caCert, caPEM, _ := makeCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "rollwal test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, nil, nil)
	_, _, srvPEM, srvKeyPEM := makeCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "rollwal writer"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, caCert, caKey)
	_, _, cliPEM, cliKeyPEM := makeCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "producer"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, caCert, caKey)
	_, _, selfPEM, selfKeyPEM := makeCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "producer"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, nil, nil)
	p := &testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "server.pem"), keyFile: filepath.Join(dir, "server.key"),
		otherKeyFile: filepath.Join(dir, "other.key"), ca: x509.NewCertPool()}
	p.ca.AddCert(caCert)
	writeTestFile(t, p.caFile, string(caPEM))
	writeTestFile(t, p.certFile, string(srvPEM))
	writeTestFile(t, p.keyFile, string(srvKeyPEM))
	writeTestFile(t, p.otherKeyFile, string(selfKeyPEM))
	var err error
	if p.client, err = tls.X509KeyPair(cliPEM, cliKeyPEM); err != nil {
		t.Fatal(err)
	}
	if p.selfSigned, err = tls.X509KeyPair(selfPEM, selfKeyPEM); err != nil {
		t.Fatal(err)
	}
	return p
}

// makeCert signs tmpl with parent's key (self-signed when parent is nil)
// and returns the new key, the certificate and both as PEM.
func makeCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	if tmpl.NotAfter.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// httpsClient trusts the test CA and presents certs (none: no client
// certificate).
func (p *testPKI) httpsClient(certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: p.ca, Certificates: certs, MinVersion: tls.VersionTLS12}}}
}

// alwaysPresenting trusts the test CA and presents cert whatever CAs the
// server names as acceptable: crypto/tls would otherwise not send a
// certificate that none of them signed, and the server's verification
// would go untested.
func (p *testPKI) alwaysPresenting(cert tls.Certificate) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: p.ca, MinVersion: tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}}}
}

// TestHTTPTLSConfig: http.tls reads from the file and its flags and builds
// the listeners' TLS configuration (client certificates required with a
// client CA); every unusable combination or file is refused by config
// check, exactly as serve would refuse it, naming the key (or the flag)
// and the file.
func TestHTTPTLSConfig(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	resolve := func(yaml string, args ...string) (Config, error) {
		path := filepath.Join(dir, "w.yaml")
		writeTestFile(t, path, yaml)
		var flagged Config
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		addHTTPFlags(f, &flagged.HTTP)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return resolveConfig(f, path, flagged)
	}
	tlsYAML := func(kv ...string) string {
		y := "http:\n  tls:\n"
		for i := 0; i+1 < len(kv); i += 2 {
			y += "    " + kv[i] + ": " + kv[i+1] + "\n"
		}
		return y
	}

	// Off by default: no TLS configuration at all.
	got, err := resolve("")
	if err != nil || got.HTTP.TLS != (HTTPTLSConfig{MinVersion: "1.2"}) {
		t.Fatalf("default http.tls %+v, %v", got.HTTP.TLS, err)
	}
	if cfg, err := got.HTTP.TLS.build(); cfg != nil || err != nil {
		t.Fatalf("default http.tls builds %v, %v; want no TLS", cfg, err)
	}
	// Server TLS only, from the file.
	got, err = resolve(tlsYAML("cert_file", pki.certFile, "key_file", pki.keyFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := got.HTTP.TLS.build()
	if err != nil || cfg == nil || len(cfg.Certificates) != 1 || cfg.ClientAuth != tls.NoClientCert || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("server TLS: %v, %v", cfg != nil, err)
	}
	// Mutual TLS and 1.3, the CA and the version from flags over the file.
	got, err = resolve(tlsYAML("cert_file", pki.certFile, "key_file", pki.keyFile, "min_version", `"1.2"`),
		"--tls-client-ca-file", pki.caFile, "--tls-min-version", "1.3")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = got.HTTP.TLS.build(); err != nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil || cfg.MinVersion != tls.VersionTLS13 {
		t.Fatalf("mutual TLS: client auth %v, client CAs %v, min version %#x, %v", cfg.ClientAuth, cfg.ClientCAs != nil, cfg.MinVersion, err)
	}
	if _, err := pki.client.Leaf.Verify(x509.VerifyOptions{Roots: cfg.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the CA-signed client certificate does not verify against the client CA pool: %v", err)
	}

	notPEM := filepath.Join(dir, "ca.txt")
	writeTestFile(t, notPEM, "not a certificate\n")
	expiredCert, expiredKey := filepath.Join(dir, "expired.pem"), filepath.Join(dir, "expired.key")
	_, _, ePEM, eKey := makeCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "old"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, nil, nil)
	writeTestFile(t, expiredCert, string(ePEM))
	writeTestFile(t, expiredKey, string(eKey))
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		yaml string
		args []string
		want string
	}{
		{tlsYAML("cert_file", pki.certFile), nil, `http.tls.cert_file "` + pki.certFile + `": is set without http.tls.key_file`},
		{tlsYAML("key_file", pki.keyFile), nil, `http.tls.key_file "` + pki.keyFile + `": is set without http.tls.cert_file`},
		{"", []string{"--tls-cert-file", pki.certFile}, `--tls-cert-file "` + pki.certFile + `": is set without http.tls.key_file`},
		{tlsYAML("client_ca_file", pki.caFile), nil, `http.tls.client_ca_file "` + pki.caFile + `": needs http.tls.cert_file and http.tls.key_file`},
		{tlsYAML("min_version", `"1.1"`), nil, `http.tls.min_version "1.1": want "1.2" or "1.3"`},
		{"", []string{"--tls-min-version", "tls13"}, `--tls-min-version "tls13": want "1.2" or "1.3"`},
		{tlsYAML("cert_file", missing, "key_file", pki.keyFile), nil, `http.tls.cert_file "` + missing + `": open ` + missing},
		{tlsYAML("cert_file", pki.certFile, "key_file", missing), nil, `http.tls.key_file "` + missing + `": open ` + missing},
		{tlsYAML("cert_file", pki.certFile, "key_file", pki.otherKeyFile), nil,
			`http.tls.cert_file "` + pki.certFile + `": with http.tls.key_file "` + pki.otherKeyFile + `": tls: private key does not match public key`},
		{tlsYAML("cert_file", pki.keyFile, "key_file", pki.keyFile), nil, `http.tls.cert_file "` + pki.keyFile + `": with http.tls.key_file`},
		{tlsYAML("cert_file", expiredCert, "key_file", expiredKey), nil, `http.tls.cert_file "` + expiredCert + `": expired at`},
		{tlsYAML("cert_file", pki.certFile, "key_file", pki.keyFile, "client_ca_file", notPEM), nil,
			`http.tls.client_ca_file "` + notPEM + `": holds no PEM certificate`},
		{tlsYAML("cert_file", pki.certFile, "key_file", pki.keyFile, "client_ca_file", pki.keyFile), nil,
			`http.tls.client_ca_file "` + pki.keyFile + `": PEM block 1 is a EC PRIVATE KEY, not a CERTIFICATE`},
		{tlsYAML("cert_file", pki.certFile, "key_file", pki.keyFile, "client_ca_file", missing), nil, `http.tls.client_ca_file "` + missing + `": open`},
		{tlsYAML("ca_file", pki.caFile), nil, `unknown key "ca_file" in section http.tls`},
	} {
		_, err := resolve(tc.yaml, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: %v, want an error containing %q", tc.yaml, tc.args, err, tc.want)
		}
	}

	// config check itself: the same refusal, and the section printed.
	path := filepath.Join(dir, "check.yaml")
	writeTestFile(t, path, tlsYAML("cert_file", pki.certFile, "client_ca_file", pki.caFile))
	if out, err := run(t, "config", "check", "--config", path); err == nil || !strings.Contains(err.Error(), "http.tls.cert_file") {
		t.Fatalf("config check of a cert without its key: %v\n%s", err, out)
	}
	writeTestFile(t, path, tlsYAML("cert_file", pki.certFile, "key_file", pki.keyFile, "client_ca_file", pki.caFile))
	out, err := run(t, "config", "check", "--config", path)
	if err != nil || !strings.Contains(out, "client_ca_file: "+pki.caFile) || !strings.Contains(out, "min_version: \"1.2\"") {
		t.Fatalf("config check of mutual TLS: %v\n%s", err, out)
	}
}

// TestMutualTLSIngest: a real `writer serve` with http.tls and a client CA.
// On the ingest listener plain HTTP, HTTPS without a client certificate
// and HTTPS with a self-signed one are all refused and store nothing; the
// CA-signed certificate posts rows, which are then in the shard. The admin
// and Iceberg REST listeners require the certificate too; the probe
// listener answers plain HTTP.
func TestMutualTLSIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	pki := newTestPKI(t, t.TempDir())
	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--flush-age", "-1s",
		"--probe-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--iceberg-rest-listen", "127.0.0.1:0",
		"--tls-cert-file", pki.certFile, "--tls-key-file", pki.keyFile, "--tls-client-ca-file", pki.caFile)
	up := p.find(msgHTTPUp)
	if up["scheme"] != "https" || up["client_certs"] != true {
		t.Fatalf("%q logged %v; want scheme https with client certs", msgHTTPUp, up)
	}
	base := "https://" + p.addr
	rowsURL := base + "/v1/shards/default/rows"

	// Plain HTTP: Go's TLS server answers a bare 400, never the handler.
	code, b, err := tryDo(&http.Client{Timeout: 30 * time.Second}, http.MethodPost, p.url("/v1/shards/default/rows"),
		server.ContentTypeNDJSON, ndjson(batchIDs("plain", 0, 5)))
	if err == nil && code == http.StatusOK {
		t.Fatalf("plain HTTP to the TLS ingest listener: %d %s", code, b)
	}
	t.Logf("plain HTTP: %d %q %v", code, b, err)
	for _, c := range []struct {
		what   string
		client *http.Client
	}{
		{"no client certificate", pki.httpsClient()},
		{"a self-signed client certificate", pki.alwaysPresenting(pki.selfSigned)},
		{"no trust in the writer's CA", &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pki.client}}}}},
	} {
		code, b, err := tryDo(c.client, http.MethodPost, rowsURL, server.ContentTypeNDJSON, ndjson(batchIDs("refused", 0, 5)))
		if err == nil {
			t.Fatalf("HTTPS with %s: answered %d %s; want the handshake refused", c.what, code, b)
		}
		t.Logf("HTTPS with %s: %v", c.what, err)
	}

	good := pki.httpsClient(pki.client)
	ids := batchIDs("mtls", 0, 7)
	code, b, err = tryDo(good, http.MethodPost, rowsURL, server.ContentTypeNDJSON, ndjson(ids))
	if err != nil {
		t.Fatal(err)
	}
	res, rerr := appendResponse(b)
	if code != http.StatusOK || rerr != nil || res.Stored != len(ids) {
		t.Fatalf("HTTPS with the CA-signed client certificate: %d %s", code, b)
	}
	code, b, err = tryDo(good, http.MethodGet, base+"/v1/shards/default", "", "")
	var st struct {
		MemtableRows int `json:"memtable_rows"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal(b, &st) != nil || st.MemtableRows != len(ids) {
		t.Fatalf("shard status over mutual TLS: %d %s %v; want the %d rows of the one accepted post, and none of the refused", code, b, err, len(ids))
	}

	// Probes: plain HTTP, no certificate.
	probe, _ := up["probe_addr"].(string)
	if code, b := httpDo(t, http.MethodGet, "http://"+probe+"/livez", "", ""); code != http.StatusOK {
		t.Fatalf("/livez on the probe listener over plain HTTP: %d %s", code, b)
	}
	// Admin and Iceberg REST: TLS with client certificates too.
	for _, l := range []struct{ msg, path string }{{"admin listening", "/debug/pprof/"}, {msgIcebergREST, "/v1/config"}} {
		rec := p.find(l.msg)
		if rec == nil || rec["scheme"] != "https" {
			t.Fatalf("%q logged %v; want scheme https", l.msg, rec)
		}
		u := "https://" + rec["addr"].(string) + l.path
		if code, b, err := tryDo(pki.httpsClient(), http.MethodGet, u, "", ""); err == nil {
			t.Fatalf("%s without a client certificate: %d %s", u, code, b)
		}
		code, b, err := tryDo(good, http.MethodGet, u, "", "")
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s with the client certificate: %d %s %v", u, code, b, err)
		}
	}
	p.stop(t)
}
