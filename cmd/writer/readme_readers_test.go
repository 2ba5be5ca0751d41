package main

// The README's examples, run as written: the reader examples of "Reading
// it" against a base that a real `writer serve` and `writer merge` made,
// and the sample configuration through `writer config check`.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"github.com/rollwal/rollwal/internal/pyenv"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/server"
	"github.com/rollwal/rollwal/vfs"
)

// readmePath is the README, from this package's directory.
const readmePath = "../../README.md"

// readerExampleRE marks a reader example in the README: an HTML comment
// (invisible when rendered) on the line right before the example's fence.
var readerExampleRE = regexp.MustCompile(`^<!-- reader-example: ([a-z0-9-]+) -->$`)

// readerExamples are the examples "Reading it" must have, by marker name,
// each either run by TestReadmeReaderExamplesRun or listed in
// readerExamplesNotRun. An example added to the README without a place
// here, or one whose marker went missing, fails the test.
var readerExamples = []string{"pyarrow", "pyiceberg-static", "duckdb", "polars", "pyiceberg-rest", "spark"}

// readerExamplesNotRun are the examples the test leaves out, and why (the
// README says so beside each).
var readerExamplesNotRun = map[string]string{
	"spark": "Spark is not installed here",
}

// The placeholders the README tells readers to replace. The examples run
// in a directory holding the data dir as data/ with the default table, so
// only the REST catalog's address needs replacing.
const readmeRESTURL = "http://127.0.0.1:8181"

type readmeExample struct {
	name, lang, body string
	line             int // of the opening fence, 1-based
}

// readmeSection returns the lines of the README from the heading head to
// the next heading of the same or a higher level, and the line number of
// the heading.
func readmeSection(t *testing.T, head string) ([]string, int) {
	t.Helper()
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	level := strings.Index(head, " ") // the number of #s
	start := slices.Index(lines, head)
	if start < 0 || level < 1 {
		t.Fatalf("%s has no heading %q", readmePath, head)
	}
	end := len(lines)
	fenced := false // a "# comment" in a code block is no heading
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "```") {
			fenced = !fenced
		}
		if n := strings.Index(lines[i], " "); !fenced && n >= 1 && n <= level && strings.Trim(lines[i][:n], "#") == "" {
			end = i
			break
		}
	}
	return lines[start:end], start + 1
}

// readmeReaderExamples extracts the marked fenced blocks of "Reading it".
func readmeReaderExamples(t *testing.T) map[string]readmeExample {
	t.Helper()
	lines, first := readmeSection(t, "### Reading it")
	out := map[string]readmeExample{}
	for i := 0; i < len(lines); i++ {
		m := readerExampleRE.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.Contains(lines[i], "reader-example") {
				t.Fatalf("README line %d: malformed marker %q; want %s", first+i, lines[i], readerExampleRE)
			}
			continue
		}
		name := m[1]
		if _, dup := out[name]; dup {
			t.Fatalf("README line %d: a second reader example %q", first+i, name)
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") || len(lines[i+1]) == 3 {
			t.Fatalf("README line %d: marker %q is not right before a fence with a language (```python)", first+i, name)
		}
		ex := readmeExample{name: name, lang: strings.TrimPrefix(lines[i+1], "```"), line: first + i + 1}
		var body []string
		j := i + 2
		for ; j < len(lines) && lines[j] != "```"; j++ {
			body = append(body, lines[j])
		}
		if j == len(lines) {
			t.Fatalf("README line %d: reader example %q has no closing fence in its section", ex.line, name)
		}
		ex.body = strings.Join(body, "\n") + "\n"
		out[name] = ex
		i = j
	}
	var got []string
	for n := range out {
		got = append(got, n)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(readerExamples))
	if !slices.Equal(got, want) {
		t.Fatalf("README \"Reading it\" has the reader examples %v; want %v (add a new one to readerExamples, to run it)", got, want)
	}
	return out
}

// readmePython is the interpreter with pyarrow, pyiceberg, DuckDB's
// iceberg extension and Polars (scripts/pyenv).
func readmePython(t *testing.T) string { return pyenv.Python(t, "the README's reader examples") }

// TestReadmeReaderExamplesRun runs the README's reader examples ("Reading
// it") as written, from a directory holding the data dir as data/ — the
// layout they document — on a base that `writer serve` (with the REST
// catalog on) and two `writer merge` passes made of rows posted over HTTP:
// each must print the number of rows posted, which also proves it read
// the latest version (the first holds fewer). Only the REST catalog's
// address is substituted, as the README tells readers to. The Spark
// example is not run (readerExamplesNotRun: Spark is not installed here).
func TestReadmeReaderExamplesRun(t *testing.T) {
	examples := readmeReaderExamples(t)
	if testing.Short() {
		t.Skip("starts processes")
	}
	py := readmePython(t)

	work := t.TempDir()
	dataDir := filepath.Join(work, "data")
	p := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--iceberg-rest-listen", "127.0.0.1:0", "--flush-age", "-1s")
	rec := p.find(msgIcebergREST)
	if rec == nil {
		t.Fatalf("no %q logged", msgIcebergREST)
	}
	restURL := "http://" + rec["addr"].(string)
	posted := 0
	for i, n := range []int{25, 15} {
		ids := batchIDs("readme", i, n)
		if code, b := httpDo(t, http.MethodPost, p.url("/v1/shards/default/rows"), server.ContentTypeNDJSON, ndjson(ids)); code != http.StatusOK {
			t.Fatalf("post: %d %s", code, b)
		}
		if code, b := httpDo(t, http.MethodPost, p.url("/v1/shards/default/flush"), "", ""); code != http.StatusOK {
			t.Fatalf("flush: %d %s", code, b)
		}
		runProc(t, time.Minute, "merge", "--data-dir", dataDir).succeeded(t)
		posted += n
	}
	// The base the examples read: at least two versions (maintenance such
	// as compaction may add more), the latest with every row.
	m, ok, err := publish.LatestReaderManifest(vfs.Default, filepath.Join(dataDir, "rollouts", "base"))
	if err != nil || !ok || m.Version < 2 || m.Rows != int64(posted) || m.IcebergMetadata == "" {
		t.Fatalf("latest readers' manifest %+v (found %v, %v); want version 2 or later with %d rows and its Iceberg metadata", m, ok, err, posted)
	}

	scripts := t.TempDir()
	for _, name := range readerExamples {
		ex := examples[name]
		if why, skip := readerExamplesNotRun[name]; skip {
			t.Logf("README line %d: reader example %q not run: %s", ex.line, name, why)
			continue
		}
		t.Run(name, func(t *testing.T) {
			if ex.lang != "python" {
				t.Fatalf("README line %d: reader example %q is ```%s; the test runs python", ex.line, name, ex.lang)
			}
			body := ex.body
			if name == "pyiceberg-rest" {
				if !strings.Contains(body, readmeRESTURL) {
					t.Fatalf("README line %d: %q does not use %s, the address the README says to replace", ex.line, name, readmeRESTURL)
				}
				body = strings.ReplaceAll(body, readmeRESTURL, restURL)
			}
			// Not <name>.py: the script's directory comes first on
			// sys.path, and pyarrow.py would shadow pyarrow.
			script := filepath.Join(scripts, "readme_example_"+strings.ReplaceAll(name, "-", "_")+".py")
			writeTestFile(t, script, body)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, py, script)
			cmd.Dir = work
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("README line %d: reader example %q: %v\nstdout:\n%s\nstderr:\n%s", ex.line, name, err, out, stderr.String())
			}
			got, err := lastInteger(out)
			if err != nil || got != posted {
				t.Fatalf("README line %d: reader example %q printed %q; want the %d rows posted", ex.line, name, out, posted)
			}
		})
	}
	p.stop(t)
}

// lastInteger parses the last non-empty line (or \r-separated segment) of
// out as an integer.
func lastInteger(out []byte) (int, error) {
	fields := strings.FieldsFunc(string(out), func(r rune) bool { return r == '\n' || r == '\r' })
	if len(fields) == 0 {
		return 0, fmt.Errorf("no output")
	}
	return strconv.Atoi(strings.TrimSpace(fields[len(fields)-1]))
}

// TestReadmeConfigChecks: the README's sample configuration passes `writer
// config check` once the files it names exist (its TLS certificates and
// keys and its object store's credential files, made here) and the variables it references are set, and its
// iceberg section comes through.
func TestReadmeConfigChecks(t *testing.T) {
	lines, first := readmeSection(t, "## Configuration")
	start := slices.Index(lines, "```yaml")
	if start < 0 {
		t.Fatalf("README line %d: the Configuration section has no ```yaml block", first)
	}
	end := slices.Index(lines[start+1:], "```")
	if end < 0 {
		t.Fatalf("README line %d: the sample configuration has no closing fence", first+start)
	}
	yaml := strings.Join(lines[start+1:start+1+end], "\n") + "\n"

	dir := t.TempDir()
	certPEM, keyPEM := selfSignedPEM(t)
	const etc = "/etc/rollwal/"
	for _, f := range regexp.MustCompile(regexp.QuoteMeta(etc)+`[A-Za-z0-9._-]+`).FindAllString(yaml, -1) {
		content := certPEM
		switch {
		case strings.HasSuffix(f, ".key"):
			content = keyPEM
		case !strings.HasSuffix(f, ".pem"): // a credential file: one key alone
			content = []byte("readme-credential-" + filepath.Base(f) + "\n")
		}
		writeTestFile(t, filepath.Join(dir, strings.TrimPrefix(f, etc)), string(content))
	}
	yaml = strings.ReplaceAll(yaml, etc, dir+"/")
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(yaml, -1) {
		t.Setenv(m[1], "readme-secret-"+m[1])
	}
	path := filepath.Join(dir, "readme.yaml")
	writeTestFile(t, path, yaml)
	out, err := run(t, "config", "check", "--config", path)
	if err != nil {
		t.Fatalf("the README's sample configuration (line %d): config check: %v\n%s", first+start+1, err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	var iceberg bool
	for sc.Scan() {
		if sc.Text() == "iceberg:" {
			iceberg = true
		} else if iceberg && strings.TrimSpace(sc.Text()) == "rest_listen: 127.0.0.1:8181" {
			return
		}
	}
	t.Fatalf("config check of the README's sample configuration does not show iceberg.rest_listen 127.0.0.1:8181:\n%s", out)
}

// selfSignedPEM is a throwaway certificate and its key, for configuration
// checks that load TLS files.
func selfSignedPEM(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rollwal-readme"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}
