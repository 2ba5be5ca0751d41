package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/server"
)

// serveHelperEnv makes the test binary act as `writer serve …` (the
// arguments after "--"): a real process that tests signal.
const serveHelperEnv = "ROLLWAL_SERVE_HELPER"

// TestServeHelperProcess is not a test: it is the child process.
func TestServeHelperProcess(t *testing.T) {
	if os.Getenv(serveHelperEnv) != "1" {
		t.Skip("the child process of the serve tests")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	root := &cobra.Command{Use: "writer", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newServe())
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveProc is a running `writer serve`.
type serveProc struct {
	cmd    *exec.Cmd
	addr   string
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan error
}

func (p *serveProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startServe starts `writer serve` and waits (bounded) for its listening line.
func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestServeHelperProcess$", "--", "serve"}, args...)...)
	cmd.Env = append(os.Environ(), serveHelperEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, exited: make(chan error, 1)}
	addrs := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.log.Write(line)
			p.log.WriteByte('\n')
			p.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "listening" {
				select {
				case addrs <- rec.Addr:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it all first
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case p.addr = <-addrs:
		return p
	case err := <-p.exited:
		t.Fatalf("writer serve exited before it was ready: %v\n%s", err, p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("writer serve was not ready within 60s:\n%s", p.output())
	}
	return nil
}

// stop sends SIGTERM and waits (bounded) for a clean exit.
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("writer serve exited with %v after SIGTERM:\n%s", err, p.output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("writer serve did not exit within 30s of SIGTERM:\n%s", p.output())
	}
}

func httpDo(t *testing.T, method, url, contentType, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestServeShutdownAndRestart posts rows to a real `writer serve`, stops it
// with SIGTERM, and starts a second one on the data dir: it claims at once
// (the first released its lease, which is far longer than the wait allowed)
// and the rows are in committed generations.
func TestServeShutdownAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--flush-age", "1h", "--lease-ttl", "60s"}
	p := startServe(t, args...)
	base := "http://" + p.addr
	if code, b := httpDo(t, http.MethodGet, base+"/readyz", "", ""); code != http.StatusOK {
		t.Fatalf("readyz once listening: %d %s", code, b)
	}
	var body strings.Builder
	for i := range 100 {
		fmt.Fprintf(&body, `{"id":"r%d","prompt":"p","completion":"c","reward":%d}`+"\n", i, i)
	}
	for i, want := range []struct{ stored, dups int }{{100, 0}, {0, 100}} {
		code, b := httpDo(t, http.MethodPost, base+"/v1/shards/default/rows?source=test&offset=100", server.ContentTypeNDJSON, body.String())
		if code != http.StatusOK {
			t.Fatalf("POST %d: %d %s", i, code, b)
		}
		var res server.AppendResponse
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		if res.Acked != 100 || res.Stored != want.stored || res.Duplicates != want.dups {
			t.Fatalf("POST %d answered %+v, want %+v of 100 acked", i, res, want)
		}
	}
	p.stop(t)

	start := time.Now()
	p2 := startServe(t, args...)
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the second writer took %v to claim: the first did not release its lease", took)
	}
	code, b := httpDo(t, http.MethodGet, "http://"+p2.addr+"/v1/shards/default", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET status: %d %s", code, b)
	}
	var st engine.Status
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	var rows int64
	for _, g := range st.Flushed {
		rows += g.Rows
	}
	if st.Epoch != 2 || rows != 100 || st.MemtableRows != 0 || st.SourceOffsets["test"] != 100 {
		t.Fatalf("second writer's status %s: want epoch 2, 100 rows in committed generations, none replayed, offset 100", b)
	}
	p2.stop(t)
}

func TestServeRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "a,a"}, `"a" named twice`},
		{[]string{"--flush-bytes", "0"}, "--flush-bytes 0"},
		{[]string{"--shutdown-timeout", "0s"}, "--shutdown-timeout"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--listen", "not-an-address"}, "--listen"},
	} {
		root := &cobra.Command{Use: "writer", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(newServe())
		root.SetArgs(append([]string{"serve", "--data-dir", t.TempDir()}, tc.args...))
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: error %v, want one naming %q", tc.args, err, tc.want)
		}
	}
}

// TestServeSIGTERMDuringIngest stops a writer while producers post: every
// acknowledged row is in the next writer's committed generations or its
// replayed WAL tail.
func TestServeSIGTERMDuringIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--flush-bytes", "65536", "--lease-ttl", "60s"}
	p := startServe(t, args...)
	url := "http://" + p.addr + "/v1/shards/default/rows"
	var (
		mu        sync.Mutex
		acked     int
		attempted int
		wg        sync.WaitGroup
	)
	enough := make(chan struct{})
	var once sync.Once
	client := &http.Client{Timeout: 30 * time.Second}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for batch := 0; ; batch++ {
				var body strings.Builder
				for i := range 50 {
					fmt.Fprintf(&body, `{"id":"w%d-b%d-r%d","prompt":"p","completion":"c"}`+"\n", w, batch, i)
				}
				mu.Lock()
				attempted += 50
				mu.Unlock()
				resp, err := client.Post(url, server.ContentTypeNDJSON, strings.NewReader(body.String()))
				if err != nil {
					return // the listener is gone
				}
				var res server.AppendResponse
				err = json.NewDecoder(resp.Body).Decode(&res)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					return
				}
				mu.Lock()
				acked += res.Stored
				if acked >= 2000 {
					once.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-enough:
	case <-time.After(60 * time.Second):
		t.Fatal("producers did not get 2000 rows acknowledged within 60s")
	}
	p.stop(t)
	wg.Wait()

	p2 := startServe(t, args...)
	code, b := httpDo(t, http.MethodGet, "http://"+p2.addr+"/v1/shards/default", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET status: %d %s", code, b)
	}
	var st engine.Status
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	var rows int64
	for _, g := range st.Flushed {
		rows += g.Rows
	}
	held := int(rows) + st.MemtableRows
	if held < acked || held > attempted {
		t.Fatalf("the next writer holds %d rows (%d committed, %d replayed); %d were acknowledged of %d posted",
			held, rows, st.MemtableRows, acked, attempted)
	}
	t.Logf("%d rows acknowledged before SIGTERM, %d held after restart (%d committed)", acked, held, rows)
	p2.stop(t)
}
