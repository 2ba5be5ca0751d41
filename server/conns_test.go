package server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveReal serves f.srv on real listeners exactly as writer serve does
// (cmd/writer/serve.go, listeners.serve): HTTPServer on Listener, and
// ProbeServer on ProbeListener. It returns both addresses.
func (f *fixture) serveReal(t *testing.T) (addr, probeAddr string) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // cleanups run last first: after the Closes below
	for _, s := range []struct {
		hs   *http.Server
		wrap func(net.Listener) net.Listener
		addr *string
	}{{f.srv.HTTPServer(), f.srv.Listener, &addr}, {f.srv.ProbeServer(), ProbeListener, &probeAddr}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		*s.addr = ln.Addr().String()
		wg.Go(func() { s.hs.Serve(s.wrap(ln)) })
		t.Cleanup(func() { s.hs.Close() })
	}
	return addr, probeAddr
}

// slowRequests are what slow clients send, and then nothing more.
var slowRequests = map[string]string{
	"headers never finished": "POST /v1/shards/s0/rows HTTP/1.1\r\nHost: w\r\nContent-Type: application/x-ndjson\r\n",
	"body trickling": "POST /v1/shards/s0/rows HTTP/1.1\r\nHost: w\r\nContent-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n" +
		`{"id":"slow",`,
	"idle keep-alive": "GET /livez HTTP/1.1\r\nHost: w\r\n\r\n",
}

// closedBy is how a slow client's connection ended: the first line the
// server answered ("" for none), or what went wrong.
type closedBy struct {
	kind, first string
	err         error
}

// slowClient sends what a slow client of kind sends, marks sent, then
// reads until the server closes the connection (bounded by a deadline far
// above the server's timeouts).
func slowClient(addr, kind string, sent *sync.WaitGroup, out chan<- closedBy) {
	conn, err := net.Dial("tcp", addr)
	if err == nil {
		defer conn.Close()
		_, err = io.WriteString(conn, slowRequests[kind])
	}
	sent.Done()
	if err != nil {
		out <- closedBy{kind: kind, err: err}
		return
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(conn)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil // reset, not EOF: closed all the same
	}
	first, _, _ := strings.Cut(string(b), "\r\n")
	out <- closedBy{kind: kind, first: first, err: err}
}

// TestSlowClientsDoNotStarve: against the listener built as serve builds
// it, limited to 8 connections, 18 slow clients (headers never finished,
// bodies trickling, idle keep-alives) take every connection and queue for
// more. A new producer's append still succeeds and /livez and /readyz
// answer, on the ingest listener once the server's timeouts free
// connections, and on the probe listener, which the ingest listener's
// clients cannot fill; every slow connection is closed by the server
// (seen as EOF or reset on the client's side), a trickling body after a
// 408; the ingest listener never serves more than its 8 at once, and a
// header over the limit is 431.
func TestSlowClientsDoNotStarve(t *testing.T) {
	const maxConns = 8
	f := newServerFixture(t, nil, func(o *Options) {
		o.HTTP = HTTPOptions{ReadHeaderTimeout: 300 * time.Millisecond, BodyReadTimeout: 500 * time.Millisecond,
			WriteTimeout: 10 * time.Second, IdleTimeout: 500 * time.Millisecond, MaxHeaderBytes: 4 << 10, MaxConns: maxConns}
	})
	f.srv.SetReady(true)
	addr, probeAddr := f.serveReal(t)

	var sent sync.WaitGroup
	closed := make(chan closedBy, 18)
	for kind := range slowRequests {
		for range 6 {
			sent.Add(1)
			go slowClient(addr, kind, &sent, closed)
		}
	}
	sent.Wait() // the producer queues behind them all
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for _, base := range []string{"http://" + probeAddr, "http://" + addr} {
		for _, path := range []string{"/livez", "/readyz"} {
			if code, b := send(t, c, http.MethodGet, base+path, ""); code != http.StatusOK {
				t.Fatalf("GET %s%s: %d %s", base, path, code, b)
			}
		}
	}
	if code, b := send(t, c, http.MethodPost, "http://"+addr+"/v1/shards/s0/rows", ndjson("p1", "p2")); code != http.StatusOK {
		t.Fatalf("a new producer's append: %d %s", code, b)
	}

	answer := map[string]string{"headers never finished": "", "body trickling": "HTTP/1.1 408 Request Timeout",
		"idle keep-alive": "HTTP/1.1 200 OK"}
	for range 18 {
		if c := <-closed; c.err != nil || c.first != answer[c.kind] {
			t.Errorf("%s: answered %q, then %v; want %q, then the server's close", c.kind, c.first, c.err, answer[c.kind])
		}
	}
	if _, peak := f.srv.Conns(); peak > maxConns {
		t.Errorf("the ingest listener served %d connections at once, its limit is %d", peak, maxConns)
	}
	big := "GET /livez HTTP/1.1\r\nHost: w\r\nX-Big: " + strings.Repeat("b", 16<<10) + "\r\n\r\n"
	if got := rawAnswer(t, addr, big); !strings.HasPrefix(got, "HTTP/1.1 431") {
		t.Errorf("a 16 KiB header answered %q, want 431", got)
	}
}

func send(t *testing.T, c *http.Client, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ContentTypeNDJSON)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rawAnswer sends raw bytes on a new connection and returns the first
// line of the answer.
func rawAnswer(t *testing.T, addr, raw string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(conn)
	first, _, _ := strings.Cut(string(b), "\r\n")
	return first
}
