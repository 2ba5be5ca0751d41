package main

// TestREADMEShellBlocks runs the README's shell blocks as a reader pastes
// them, and the TestReadme*Reference tests check that the reference
// documents under docs/ name everything the code has (every configuration
// key, metric series, route and error code) and that the full sample
// configuration there passes `writer config check`.
//
// The rule for the README is simple: every ```sh block runs, in order,
// and must succeed; a listing meant to be adapted (placeholders, a
// cluster that is not here, Spark) is fenced ```text instead. How they
// run:
//
//   - One bash (`set -euo pipefail`) for all of them, in a fresh temporary
//     directory as the working directory, as one terminal session: the
//     quickstart's `writer serve … &` keeps running for the later blocks,
//     its `serve=$!` and the shell functions a block defines stay set, and
//     the last block stops it (`kill $serve && wait $serve`). Each block is
//     sourced from a file padded so that $LINENO is its README line: a
//     failing command is named by its README line. Each block has its own
//     timeout (readmeBlockTimeout). Whatever is left running at the end
//     (the shell's process group) is killed.
//   - `writer` is the binary `go build -o <tmp>/bin/writer ./cmd/writer`
//     builds from this checkout, first on PATH.
//   - Lines that need the checkout are rewritten, by this fixed list and no
//     other: `go run ./cmd/writer` becomes `writer` (the same program,
//     built from the same source), `go install ./cmd/writer` is skipped
//     (the build above is what it does, into another directory), and
//     `bash scripts/test` is skipped (it runs this test). So of the first
//     block (the two set-up commands) only its generate runs: into the
//     temporary directory's ./data, as the README's later blocks expect.
//   - The README's address 127.0.0.1:8080 is replaced by a free port, in
//     the blocks and in the files below; no other spelling of port 8080 is
//     allowed in a block, so that the substitution is complete.
//   - A fenced block right after `<!-- readme-file: NAME -->` is written to
//     NAME in the working directory when the blocks before it have run (the
//     README says to save it under that name): the sample configuration,
//     which the next block checks with `writer config check`.
//
// It also checks what the README promises its reader: that it starts with
// the two set-up commands, installs `writer` before it uses it bare, waits
// for readiness before it talks to a backgrounded serve, and uses distinct
// ids and only the shard names its serves claim.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rollwal/rollwal/internal/testproc"
)

const (
	// readmeAddr is the serve address the README's blocks use; the test
	// gives them a free port instead.
	readmeAddr = "127.0.0.1:8080"
	// readmeBlockTimeout bounds each block (the set-up generate of 100,000
	// rows is the slowest: seconds, on a loaded 2-core machine tens).
	readmeBlockTimeout = 3 * time.Minute
)

var readmeFileRE = regexp.MustCompile(`^<!-- readme-file: ([A-Za-z0-9._-]+) -->$`)

// readmeFence is a fenced block of the README.
type readmeFence struct {
	line int    // of the opening fence, 1-based
	lang string // the fence's info string: "sh", "text", "" …
	body string
	file string // the name a readme-file marker gives it, if any
}

// readmeFences returns every fenced block of the file at path, in order.
func readmeFences(t *testing.T, path string) []readmeFence {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []readmeFence
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		f := readmeFence{line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(lines[i], "```"))}
		if i > 0 {
			if m := readmeFileRE.FindStringSubmatch(lines[i-1]); m != nil {
				f.file = m[1]
			} else if strings.Contains(lines[i-1], "readme-file") {
				t.Fatalf("%s line %d: malformed marker %q; want %s", path, i, lines[i-1], readmeFileRE)
			}
		}
		j := i + 1
		for ; j < len(lines) && lines[j] != "```"; j++ {
		}
		if j == len(lines) {
			t.Fatalf("%s line %d: a fence that is never closed", path, f.line)
		}
		f.body = strings.Join(lines[i+1:j], "\n") + "\n"
		out = append(out, f)
		i = j
	}
	return out
}

// readmeRewrites are the only changes made to the README's shell lines
// (besides the port): what needs the checkout, per the file's comment.
func readmeRewrite(line string) string {
	trimmed := strings.TrimSpace(line)
	switch {
	case strings.HasPrefix(trimmed, "bash scripts/test"):
		return ": # not run here: bash scripts/test runs this test"
	case strings.HasPrefix(trimmed, "go install ./cmd/writer"):
		return ": # not run here: the test built writer from this checkout onto PATH"
	}
	return strings.ReplaceAll(line, "go run ./cmd/writer", "writer")
}

// TestREADMEShellBlocks runs every ```sh block of the README in order, in
// one shell on a fresh directory with a real writer serve; see the file's
// comment for how.
func TestREADMEShellBlocks(t *testing.T) {
	fences := readmeFences(t, readmePath)
	var blocks []readmeFence // the sh blocks and the files, in README order
	for _, f := range fences {
		switch f.lang {
		case "sh":
			blocks = append(blocks, f)
		case "bash", "shell", "console", "zsh", "shell-session":
			t.Errorf("README line %d: a ```%s block; fence shell as ```sh (TestREADMEShellBlocks runs it) or ```text (a listing it does not)", f.line, f.lang)
		default:
			if f.file != "" {
				blocks = append(blocks, f)
			}
		}
	}
	checkReadmeShape(t, fences, blocks)
	if t.Failed() {
		t.FailNow()
	}
	if testing.Short() {
		t.Skip("builds writer and runs the README's blocks with a real writer serve")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("the README's blocks need bash: %v", err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("the README's blocks need curl (its Requirements say so): %v", err)
	}

	tmp := t.TempDir()
	work := filepath.Join(tmp, "work")  // the reader's directory
	scripts := filepath.Join(tmp, "sh") // the blocks as sourced files
	binDir := filepath.Join(tmp, "bin") // writer
	for _, d := range []string{work, scripts, binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	goBin := buildReadmeWriter(t, binDir)
	ports, err := testproc.PickPorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])

	sh := startReadmeShell(t, bash, work, binDir+string(os.PathListSeparator)+filepath.Dir(goBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	sh.send(t, "set -euo pipefail\n"+
		`trap 'echo "README.md:$LINENO: exit $?: $BASH_COMMAND" >&2' ERR`+"\n")
	began := time.Now()
	for i, b := range blocks {
		body := strings.ReplaceAll(b.body, readmeAddr, addr)
		if b.lang != "sh" {
			writeTestFile(t, filepath.Join(work, b.file), body)
			t.Logf("README line %d: wrote %s", b.line, b.file)
			continue
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
			lines = append(lines, readmeRewrite(l))
		}
		// Padded so that $LINENO is the README's line.
		script := filepath.Join(scripts, fmt.Sprintf("block%02d.sh", i))
		writeTestFile(t, script, strings.Repeat("\n", b.line)+strings.Join(lines, "\n")+"\n")
		start := time.Now()
		out, err := sh.run(t, script, i, readmeBlockTimeout)
		if err != nil {
			t.Fatalf("README line %d: the ```sh block failed: %v\n--- block (as run) ---\n%s--- output ---\n%s%s",
				b.line, err, strings.Join(lines, "\n")+"\n", out, readmeServeLog(work))
		}
		t.Logf("README line %d: ```sh block ok in %v:\n%s", b.line, time.Since(start).Round(time.Millisecond), indent(out))
	}
	sh.finish(t)
	t.Logf("%d README blocks in %v", len(blocks), time.Since(began).Round(time.Millisecond))
}

// checkReadmeShape checks the README's promises to its reader (see the
// file's comment).
func checkReadmeShape(t *testing.T, fences, blocks []readmeFence) {
	t.Helper()
	// It starts with the two set-up commands, in its first fenced block.
	if len(fences) == 0 || fences[0].lang != "sh" {
		t.Errorf("README: the first fenced block must be the ```sh block of the two set-up commands")
	} else {
		first := strings.Split(strings.TrimSpace(fences[0].body), "\n")
		if len(first) != 2 || !strings.HasPrefix(first[0], "go run ./cmd/writer generate") || !strings.HasPrefix(first[1], "bash scripts/test") {
			t.Errorf("README line %d: the first block must be exactly `go run ./cmd/writer generate …` and `bash scripts/test …`; it is:\n%s", fences[0].line, fences[0].body)
		}
	}
	installed := false
	served := map[string]bool{}
	ids := map[string]int{} // id → README line of the block that first uses it
	shardUse := regexp.MustCompile(`/shards/([A-Za-z0-9._-]+)|--shard[ =]([A-Za-z0-9._-]+)|inspect (?:shard|generations) ([A-Za-z0-9._-]+)|snapshot get ([A-Za-z0-9._-]+)/`)
	for _, b := range blocks {
		if b.lang != "sh" {
			continue
		}
		lines := strings.Split(b.body, "\n")
		waiting := false // a backgrounded serve that nothing waited for yet
		for k, l := range lines {
			at := b.line + 1 + k
			cmd := strings.TrimSpace(strings.SplitN(l, " #", 2)[0]) // without its comment
			if strings.HasPrefix(cmd, "go install ./cmd/writer") {
				installed = true
			}
			if regexp.MustCompile(`(^|[|;&(]\s*)writer `).MatchString(cmd) && !strings.Contains(cmd, "go run ./cmd/writer") && !installed {
				t.Errorf("README line %d: uses a bare `writer` before any block installs it (go install ./cmd/writer)", at)
			}
			if strings.Contains(l, ":8080") && !strings.Contains(l, readmeAddr) || strings.Contains(l, "localhost:8080") {
				t.Errorf("README line %d: spell the serve address %s, the one the test replaces: %s", at, readmeAddr, cmd)
			}
			if strings.HasPrefix(cmd, "writer serve") || strings.HasPrefix(cmd, "go run ./cmd/writer serve") {
				names := []string{"default"}
				if m := regexp.MustCompile(`--shards[ =]([A-Za-z0-9._,-]+)`).FindStringSubmatch(cmd); m != nil {
					names = strings.Split(m[1], ",")
				}
				for _, n := range names {
					served[n] = true
				}
				waiting = strings.Contains(cmd, "&")
			}
			if strings.HasPrefix(cmd, "go run ./cmd/writer generate") || strings.HasPrefix(cmd, "writer generate") {
				served["s0"], served["s1"] = true, true // generate's shards, named s0, s1, …
			}
			if waiting && strings.Contains(cmd, "curl") {
				if !strings.Contains(cmd, "/readyz") {
					t.Errorf("README line %d: talks to the serve started in the block at line %d before waiting for /readyz: %s", at, b.line, cmd)
				}
				waiting = false
			}
			for _, m := range shardUse.FindAllStringSubmatch(cmd, -1) {
				for _, n := range m[1:] {
					if n != "" && !served[n] {
						t.Errorf("README line %d: shard %q, which no writer serve of the README claims (it claims %v): %s", at, n, slices.Sorted(maps.Keys(served)), cmd)
					}
				}
			}
		}
	}
	// Distinct ids: no id in two examples (a retry inside one is one use).
	idRE := regexp.MustCompile(`"id":\s*"([^"]+)"|"id":\s*\[([^\]]*)\]`)
	for _, f := range fences {
		for _, m := range idRE.FindAllStringSubmatch(f.body, -1) {
			var found []string
			if m[1] != "" {
				found = []string{m[1]}
			} else {
				for _, q := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(m[2], -1) {
					found = append(found, q[1])
				}
			}
			for _, id := range found {
				if first, ok := ids[id]; ok && first != f.line {
					t.Errorf("README line %d: id %q is used again (first in the block at line %d): give every example its own ids", f.line, id, first)
				}
				ids[id] = f.line
			}
		}
	}
}

func indent(s string) string {
	if s == "" {
		return "    (no output)\n"
	}
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// readmeServeLog is the tail of the quickstart's serve.log, for a failure.
func readmeServeLog(work string) string {
	b, err := os.ReadFile(filepath.Join(work, "serve.log"))
	if err != nil {
		return ""
	}
	return "--- serve.log, last lines ---\n" + lastLines(string(b), 30) + "\n"
}

// buildReadmeWriter builds writer from this checkout into dir and returns
// the go command it used.
func buildReadmeWriter(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := testproc.GoCommand()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", filepath.Join(dir, "writer"), "./cmd/writer")
	cmd.Dir = filepath.Join("..", "..") // the module's root, from this package's directory
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -o %s/writer ./cmd/writer: %v\n%s", dir, err, out)
	}
	return goBin
}

// readmeShell is one bash that the blocks are sourced into, with its
// stdout and stderr in one stream.
type readmeShell struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu      sync.Mutex
	out     bytes.Buffer
	changed chan struct{} // closed, and replaced, when output arrives
	exited  chan struct{} // closed once bash exited
	waitErr error
}

func startReadmeShell(t *testing.T, bash, dir, path string) *readmeShell {
	t.Helper()
	cmd := exec.Command(bash, "--noprofile", "--norc")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+path)
	// Its own process group: a block's background processes (writer serve
	// &) join it, and the cleanup kills the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	s := &readmeShell{cmd: cmd, stdin: stdin, changed: make(chan struct{}), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // the children hold it; the pipe ends when the last one exits
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			s.mu.Lock()
			s.out.Write(buf[:n])
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			if err != nil {
				r.Close()
				return
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(s.exited)
	}()
	t.Cleanup(func() {
		// Whatever the blocks left running, and bash itself.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("bash (pid %d) did not exit after SIGKILL", cmd.Process.Pid)
		}
	})
	return s
}

func (s *readmeShell) send(t *testing.T, text string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, text); err != nil {
		t.Fatalf("write to bash: %v", err)
	}
}

// run sources script (stdin /dev/null, as a terminal's paste would not
// feed the block's commands from the script) and returns its output once
// it is done; an error when bash exited (a command failed: set -e) or the
// block ran past d.
func (s *readmeShell) run(t *testing.T, script string, n int, d time.Duration) (string, error) {
	t.Helper()
	marker := fmt.Sprintf("@@readme-block-%d-done@@", n)
	s.mu.Lock()
	from := s.out.Len()
	s.mu.Unlock()
	s.send(t, fmt.Sprintf(". %q </dev/null\nprintf '\\n%%s\\n' %s\n", script, marker))
	deadline := time.After(d)
	for {
		s.mu.Lock()
		out := s.out.String()[from:]
		changed := s.changed
		s.mu.Unlock()
		if i := strings.Index(out, "\n"+marker+"\n"); i >= 0 {
			return out[:i] + "\n", nil
		}
		select {
		case <-changed:
		case <-s.exited:
			time.Sleep(100 * time.Millisecond) // the last output
			s.mu.Lock()
			out, err := s.out.String()[from:], s.waitErr
			s.mu.Unlock()
			return out, fmt.Errorf("bash exited (%v): a command of the block failed", err)
		case <-deadline:
			s.mu.Lock()
			out := s.out.String()[from:]
			s.mu.Unlock()
			return out, fmt.Errorf("still running after %v", d)
		}
	}
}

// finish ends the shell: its stdin closed, it exits 0 once the blocks are
// done.
func (s *readmeShell) finish(t *testing.T) {
	t.Helper()
	s.stdin.Close()
	select {
	case <-s.exited:
		if s.waitErr != nil {
			t.Fatalf("bash exited with %v after the last block", s.waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("bash did not exit after the last block")
	}
}

// TestReadmeConfigReference: docs/configuration.md names every key of the
// configuration file (the Config type's yaml keys, nested ones dotted),
// and its full sample passes `writer config check` once the files it
// names exist and the variables it references are set (as
// TestReadmeConfigChecks does for the README's short one).
func TestReadmeConfigReference(t *testing.T) {
	const path = "../../docs/configuration.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range configKeys(reflect.TypeOf(Config{}), "") {
		if !bytes.Contains(doc, []byte("`"+key+"`")) {
			t.Errorf("%s does not name the configuration key `%s`", path, key)
		}
	}
	var sample *readmeFence
	for _, f := range readmeFences(t, path) {
		if f.lang == "yaml" && f.file == "writer-full.yaml" {
			sample = &f
			break
		}
	}
	if sample == nil {
		t.Fatalf("%s has no ```yaml block marked <!-- readme-file: writer-full.yaml -->, the full sample", path)
	}
	dir := t.TempDir()
	yamlText := sample.body
	certPEM, keyPEM := selfSignedPEM(t)
	const etc = "/etc/rollwal/"
	for _, f := range regexp.MustCompile(regexp.QuoteMeta(etc)+`[A-Za-z0-9._-]+`).FindAllString(yamlText, -1) {
		content := certPEM
		switch {
		case strings.HasSuffix(f, ".key"):
			content = keyPEM
		case !strings.HasSuffix(f, ".pem"): // a credential file or a token file: one key alone
			content = []byte("readme-credential-" + filepath.Base(f) + "\n")
		}
		writeTestFile(t, filepath.Join(dir, strings.TrimPrefix(f, etc)), string(content))
	}
	yamlText = strings.ReplaceAll(yamlText, etc, dir+"/")
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(yamlText, -1) {
		t.Setenv(m[1], "readme-secret-"+m[1])
	}
	cfg := filepath.Join(dir, "writer-full.yaml")
	writeTestFile(t, cfg, yamlText)
	if out, err := run(t, "config", "check", "--config", cfg); err != nil {
		t.Fatalf("%s line %d, the full sample: config check: %v\n%s", path, sample.line, err, out)
	}
}

// configKeys lists the yaml keys of t, dotted below prefix; a list of
// structs (tables) as key[].field. Columns are one key: their own keys are
// the schema's (README "Columns and types").
func configKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		out = append(out, key)
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case name == "columns", key == "tables[].storage": // the schema's keys; a storage: section's (storage.*)
		case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Duration(0)):
			out = append(out, configKeys(ft, key+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(ft.Elem(), key+"[].")...)
		}
	}
	return out
}

// TestReadmeMetricsReference: docs/metrics.md names every metric the
// module's code registers (writer_* and rollwal_*).
func TestReadmeMetricsReference(t *testing.T) {
	const path = "../../docs/metrics.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // name → file
	nameRE := regexp.MustCompile(`"((?:writer|rollwal)_[a-z0-9_]+)"`)
	root := filepath.Join("..", "..")
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bench"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go"):
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(src, []byte("github.com/prometheus/client_golang/prometheus")) {
			return err
		}
		for _, m := range nameRE.FindAllSubmatch(src, -1) {
			names[string(m[1])] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metric names in the code: %v", len(names), names)
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if !bytes.Contains(doc, []byte("`"+n+"`")) {
			t.Errorf("%s does not describe `%s` (registered in %s)", path, n, names[n])
		}
	}
}

// TestReadmeHTTPReference: docs/http-api.md names every route the server
// registers, in both its forms, and every error code it answers.
func TestReadmeHTTPReference(t *testing.T) {
	const path = "../../docs/http-api.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := readSources(t, "../../server/server.go", "../../server/auth.go", "../../server/tables.go")
	var want []string
	for _, m := range regexp.MustCompile(`\{"(GET|POST)", "(/shards[^"]*)"`).FindAllStringSubmatch(src, -1) {
		want = append(want, m[1]+" /v1"+m[2], m[1]+" /v1/tables/{table}"+m[2])
	}
	for _, m := range regexp.MustCompile(`HandleFunc\("(GET|POST) (/[^"]*)"`).FindAllStringSubmatch(src, -1) {
		want = append(want, m[1]+" "+m[2])
	}
	want = append(want, "GET /metrics", "/debug/pprof/")
	if len(want) < 14 {
		t.Fatalf("found only %d routes in the server's code: %v", len(want), want)
	}
	for _, w := range want {
		if !strings.Contains(string(doc), "`"+w+"`") {
			t.Errorf("%s does not document `%s`", path, w)
		}
	}
	codes := regexp.MustCompile(`code[A-Z][A-Za-z]*\s*=\s*"([a-z_]+)"`).FindAllStringSubmatch(src, -1)
	if len(codes) < 15 {
		t.Fatalf("found only %d error codes in the server's code", len(codes))
	}
	for _, m := range codes {
		if !strings.Contains(string(doc), "`"+m[1]+"`") {
			t.Errorf("%s does not document the error code `%s`", path, m[1])
		}
	}
}

func readSources(t *testing.T, paths ...string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// TestReadmeConfigReferenceDefaults: the defaults docs/configuration.md
// gives are those `writer config check` prints for an empty configuration
// (for the keys it prints a scalar for).
func TestReadmeConfigReferenceDefaults(t *testing.T) {
	const path = "../../docs/configuration.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "config", "check")
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(out), &root); err != nil {
		t.Fatalf("config check printed no YAML: %v\n%s", err, out)
	}
	// The reference's rows: | `key` | default | ...
	rowRE := regexp.MustCompile("(?m)^\\| `([a-z_.\\[\\]]+)` \\| ([^|]*) \\|")
	rows := map[string]string{}
	for _, m := range rowRE.FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = strings.TrimSpace(m[2])
	}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			key := prefix + k
			switch v.Kind {
			case yaml.MappingNode:
				walk(v, key+".")
			case yaml.ScalarNode:
				got, ok := rows[key]
				if !ok {
					t.Errorf("%s has no row | `%s` | default | … |", path, key)
					continue
				}
				want := v.Value
				if want == "" {
					want = `""`
				}
				if !strings.Contains(got, "`"+want+"`") {
					t.Errorf("%s: the default of `%s` is %q; config check prints %q", path, key, got, want)
				}
			}
		}
	}
	walk(root.Content[0], "")
}
