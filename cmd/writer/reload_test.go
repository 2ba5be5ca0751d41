package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollwal/rollwal/server"
)

// TestCredentialsReloadOnHangup: a real `writer serve` with bearer tokens,
// TLS and the Iceberg REST catalog takes new token files and a new
// certificate at SIGHUP, without a restart: the old tokens are refused
// from then on, the new ones admitted, and new handshakes present the new
// certificate. A reload that meets a bad file changes nothing and says
// which file; the process serves on either way.
func TestCredentialsReloadOnHangup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	old, next := newTestPKI(t, t.TempDir()), newTestPKI(t, t.TempDir())
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	copyFile(t, old.certFile, certFile)
	copyFile(t, old.keyFile, keyFile)
	ingestFile, adminFile := filepath.Join(dir, "ingest.tokens"), filepath.Join(dir, "admin.tokens")
	const oldIngest, oldAdmin = "ingest-token-old-0123456789", "admin-token-old-0123456789"
	const newIngest, newAdmin = "ingest-token-new-0123456789", "admin-token-new-0123456789"
	replaceFile(t, ingestFile, oldIngest+"\n")
	replaceFile(t, adminFile, oldAdmin+"\n")

	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--flush-age", "-1s",
		"--iceberg-rest-listen", "127.0.0.1:0", "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--ingest-token-file", ingestFile, "--admin-token-file", adminFile)
	rowsURL := "https://" + p.addr + "/v1/shards/default/rows"
	restURL := "https://" + p.find(msgIcebergREST)["addr"].(string) + "/v1/config"
	post := func(c *http.Client, token, what string, want int) {
		t.Helper()
		code, b, err := tryDoAuth(c, http.MethodPost, rowsURL, token, ndjson(batchIDs(what, 0, 3)))
		if err != nil || code != want {
			t.Fatalf("%s: %d %s %v; want %d", what, code, b, err, want)
		}
	}
	getConfig := func(c *http.Client, token, what string, want int) {
		t.Helper()
		code, b, err := tryDoAuth(c, http.MethodGet, restURL, token, "")
		if err != nil || code != want {
			t.Fatalf("%s: %d %s %v; want %d", what, code, b, err, want)
		}
	}
	post(old.httpsClient(), oldIngest, "old-token", http.StatusOK)
	getConfig(old.httpsClient(), oldAdmin, "REST with the old admin token", http.StatusOK)

	// Rotate everything, then SIGHUP.
	copyFile(t, next.certFile, certFile)
	copyFile(t, next.keyFile, keyFile)
	replaceFile(t, ingestFile, newIngest+"\n")
	replaceFile(t, adminFile, newAdmin+"\n")
	p.signal(t, syscall.SIGHUP)
	rec := p.waitLog(t, 30*time.Second, msgCredentialsReloaded)
	if rec["ingest_tokens"] != 1.0 || rec["admin_tokens"] != 1.0 || rec["cert_expires"] == nil {
		t.Fatalf("%q logged %v", msgCredentialsReloaded, rec)
	}
	if _, _, err := tryDoAuth(old.httpsClient(), http.MethodPost, rowsURL, newIngest, ndjson(batchIDs("old-ca", 0, 3))); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client that trusts only the old CA: %v; want the handshake refused on the new certificate", err)
	}
	c := next.httpsClient()
	post(c, oldIngest, "old-token-after-rotation", http.StatusUnauthorized)
	post(c, newIngest, "new-token", http.StatusOK)
	getConfig(c, oldAdmin, "REST with the old admin token after rotation", http.StatusUnauthorized)
	getConfig(c, newAdmin, "REST with the new admin token", http.StatusOK)

	// A bad token file: nothing changes, and the log names the file.
	replaceFile(t, ingestFile, "not a token\n")
	p.signal(t, syscall.SIGHUP)
	rec = p.waitLog(t, 30*time.Second, msgCredentialsKept)
	if err, _ := rec["err"].(string); !strings.Contains(err, ingestFile) || !strings.Contains(err, "line 1 is not a bearer token") {
		t.Fatalf("%q logged %v; want the ingest token file and its fault named", msgCredentialsKept, rec)
	}
	post(c, newIngest, "new-token-after-bad-reload", http.StatusOK)
	getConfig(c, newAdmin, "REST after the bad reload", http.StatusOK)
	code, b, err := tryDo(c, http.MethodGet, "https://"+p.addr+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, want := range []string{`writer_credentials_reloads_total{result="ok"} 1`, `writer_credentials_reloads_total{result="failed"} 1`,
		"writer_tls_certificate_expiry_timestamp_seconds "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	p.stop(t)
}

// tryDoAuth is tryDo with a bearer token.
func tryDoAuth(c *http.Client, method, url, token, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", server.ContentTypeNDJSON)
	}
	return doRequest(c, req)
}

// replaceFile writes data to path by a rename, as a rotation should: a
// reload never reads half a file.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	writeTestFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, to, string(b))
}
