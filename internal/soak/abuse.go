package soak

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// slowOpenLimit is how long a slow connection may stay open: the serve
// must close it well before (its header, body and idle timeouts).
const slowOpenLimit = 5 * time.Minute

// slowClients keeps SlowClients connections open the way careless or
// hostile clients do: headers never finished, a body that trickles, an
// idle keep-alive. Each must be closed by the server (not only by a
// restart of it), and then it connects again.
func (r *run) slowClients(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range r.cfg.SlowClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r.slowConn(ctx, i%3)
			}
		}()
	}
	wg.Wait()
}

// The openings of the kinds of slow connection.
var slowOpenings = [3]string{
	"POST /v1/shards/s0/rows HTTP/1.1\r\nHost: soak\r\n",
	"POST /v1/shards/s0/rows HTTP/1.1\r\nHost: soak\r\nContent-Type: application/x-ndjson\r\nContent-Length: 1048576\r\n\r\n{\"id\":",
	"GET /livez HTTP/1.1\r\nHost: soak\r\n\r\n",
}

// slowConn opens one slow connection of the given kind and holds it until
// the server closes it, ctx ends or slowOpenLimit passes.
func (r *run) slowConn(ctx context.Context, kind int) {
	starts := r.starts()
	conn, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
	if err != nil {
		waitCtx(ctx, time.Second) // the serve is down: try again soon
		return
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, slowOpenings[kind]); err != nil {
		return
	}
	r.count(&r.rep.SlowOpened)
	opened := time.Now()
	buf := make([]byte, 4096)
	for ctx.Err() == nil {
		if time.Since(opened) > slowOpenLimit {
			r.fail("a slow connection (%q…) stayed open %v: the server never closed it", slowOpenings[kind][:20], slowOpenLimit)
			return
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err := conn.Read(buf) // the idle kind reads its answer first
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if kind == 1 {
				conn.Write([]byte("x")) // one byte of body a second
			}
			continue
		}
		if err != nil {
			if r.starts() == starts {
				r.count(&r.rep.SlowClosedByServer)
			}
			return
		}
	}
}

// badRequests sends, once a second, a request that must be refused with a
// 4xx: an oversized body, malformed NDJSON, an id of invalid UTF-8, a
// shard nobody serves. A 5xx (other than 503 while the serve restarts) is
// a failure: producers retry a 5xx forever.
func (r *run) badRequests(ctx context.Context) {
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	oversized := bytes.Repeat([]byte("x"), int(r.cfg.MaxBodyBytes)+1)
	cases := []struct {
		what, shard string
		body        []byte
		want        int
	}{
		{"oversized body", "s0", oversized, http.StatusRequestEntityTooLarge},
		{"malformed NDJSON", "s0", []byte(`{"id":"a","prompt":`), http.StatusBadRequest},
		{"invalid UTF-8 id", "s0", []byte("{\"id\":\"u\xff1\",\"prompt\":\"p\",\"completion\":\"c\"}\n"), http.StatusBadRequest},
		{"trailing garbage", "s0", []byte(`{"id":"t1","prompt":"p","completion":"c"}]` + "\n"), http.StatusBadRequest},
		{"unknown shard", "nobody", []byte(`{"id":"n1","prompt":"p","completion":"c"}` + "\n"), http.StatusNotFound},
	}
	for n := 0; waitCtx(ctx, time.Second); n++ {
		c := cases[n%len(cases)]
		code, body, err := post(ctx, hc, "http://"+r.addr+"/v1/shards/"+c.shard+"/rows", c.body)
		switch {
		case err != nil || code == http.StatusServiceUnavailable:
			// the serve is down or not yet ready
		case code == c.want:
			r.count(&r.rep.BadRefused)
		default:
			r.fail("%s: answered %d, want %d: %.300s", c.what, code, c.want, body)
		}
	}
}

func post(ctx context.Context, hc *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// waitCtx waits d; false if ctx ended first.
func waitCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (r *run) starts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rep.Starts
}

func (r *run) count(n *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*n++
}
