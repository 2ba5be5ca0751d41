package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rollwal/rollwal/client"
	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/arrowtest"
	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/server"
)

const (
	// httpClients post concurrently, each its share of an op's rows.
	httpClients = 4
	// httpRowsPerOp is one b.N iteration: enough requests at batch 1000
	// for a percentile, small enough that -benchtime 2x stays short.
	httpRowsPerOp = 16000
)

// BenchmarkHTTPIngest posts batches of 1 KiB-class rollouts from
// concurrent clients over loopback to a real server and engine (OS
// filesystem, embedded etcd) and pairs every op with the in-process Append
// of the same rows, batch size and concurrency in the same run (another
// shard of the same host): x-inprocess = HTTP rows/s ÷ in-process rows/s.
// Clients and server share the machine's cores, as they do on one host.
// Both paths end at the WAL fsync; flushes run between ops, off the clock.
func BenchmarkHTTPIngest(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		for _, format := range []string{"ndjson", "arrow"} {
			b.Run(fmt.Sprintf("batch=%d/format=%s/clients=%d", batch, format, httpClients), func(b *testing.B) {
				benchHTTP(b, batch, format)
			})
		}
	}
}

// httpEnv is a host with shards "http" (posted to) and "local" (appended
// to in-process) behind a server on a loopback listener.
type httpEnv struct {
	host  *engine.Host
	local *engine.Shard
	ts    *httptest.Server
	// clients are one per concurrent producer, each its own session, as
	// producers are: one session's batches to a shard go one at a time.
	clients []*client.Client
	// arrowHTTP posts Arrow bodies; like the client's, its transport keeps
	// a connection per concurrent client.
	arrowHTTP *http.Client
	pool      [][]map[string]any // per client: payloads reused under fresh ids
}

func newHTTPEnv(b *testing.B) *httpEnv {
	ctx := context.Background()
	h, err := engine.NewHost(engine.Options{
		DataDir: b.TempDir(), Table: fmt.Sprintf("http%d", time.Now().UnixNano()), Etcd: etcdClient,
		FlushBytes: 128 << 20, MemoryBudget: 512 << 20, BudgetWait: time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	env := &httpEnv{host: h}
	if _, err = h.Open(ctx, "http"); err != nil {
		b.Fatal(err)
	}
	if env.local, err = h.Open(ctx, "local"); err != nil {
		b.Fatal(err)
	}
	srv := server.New(server.Options{Host: h, Shards: []string{"http", "local"}})
	srv.SetReady(true)
	env.ts = httptest.NewServer(srv)
	for range httpClients {
		c, err := client.New(env.ts.URL, client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		env.clients = append(env.clients, c)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = httpClients
	env.arrowHTTP = &http.Client{Transport: t}
	for c := range httpClients {
		g := rolloutgen.New(uint64(c+1), fmt.Sprintf("c%d", c))
		env.pool = append(env.pool, nil)
		for _, r := range g.Rows(1000) {
			env.pool[c] = append(env.pool[c], r)
		}
	}
	return env
}

func (env *httpEnv) close(b *testing.B) {
	env.ts.Close()
	if err := env.host.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// request is one batch: its rows, and its body in the format posted.
// Bodies are encoded beforehand, off the clock, in both formats: what a
// producer spends encoding its rows is not the writer's, and the
// benchmark's own clients share the writer's cores.
type request struct {
	rows          []map[string]any
	arrow, ndjson []byte
}

// prepare builds op's requests per client, under ids unique to the op.
func (env *httpEnv) prepare(b *testing.B, op, batch int, format string) [][]request {
	out := make([][]request, httpClients)
	perClient := httpRowsPerOp / httpClients
	for c := range out {
		for start := 0; start < perClient; start += batch {
			rows := make([]map[string]any, batch)
			for i := range rows {
				rows[i] = maps.Clone(env.pool[c][(start+i)%len(env.pool[c])])
				rows[i]["id"] = fmt.Sprintf("op%d-c%d-%d", op, c, start+i)
			}
			req := request{rows: rows}
			if format == "arrow" {
				req.arrow = arrowBody(b, rows)
			} else {
				req.ndjson = ndjsonBody(b, rows)
			}
			out[c] = append(out[c], req)
		}
	}
	return out
}

func benchHTTP(b *testing.B, batch int, format string) {
	env := newHTTPEnv(b)
	defer env.close(b)
	var httpTime, localTime time.Duration
	var lat []time.Duration
	b.ResetTimer()
	for op := range b.N {
		b.StopTimer()
		work := env.prepare(b, op, batch, format)
		// Alternate which path goes first, so that neither always meets a
		// warmer (or more fragmented) process.
		if op%2 == 1 {
			localTime += env.runLocal(b, work)
		}
		b.StartTimer()
		took, l := runClients(b, work, env.post)
		b.StopTimer()
		httpTime += took
		lat = append(lat, l...)
		if op%2 == 0 {
			localTime += env.runLocal(b, work)
		}
		env.flush(b)
		b.StartTimer()
	}
	b.StopTimer()
	rows := float64(b.N * httpRowsPerOp)
	slices.Sort(lat)
	b.ReportMetric(rows/httpTime.Seconds(), "rows/s")
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(localTime.Seconds()/httpTime.Seconds(), "x-inprocess")
}

func (env *httpEnv) runLocal(b *testing.B, work [][]request) time.Duration {
	took, _ := runClients(b, work, func(_ int, r request) error { return env.appendLocal(r) })
	return took
}

// flush commits both shards between ops, off the clock: an op's rows stay
// below FlushBytes, so no flush runs during either path and the two
// measure the same append path.
func (env *httpEnv) flush(b *testing.B) {
	for _, sh := range env.host.Shards() {
		if _, err := sh.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runClients runs each client's requests in its own goroutine and returns
// the wall time and every request's latency.
func runClients(b *testing.B, work [][]request, send func(c int, r request) error) (time.Duration, []time.Duration) {
	lat := make([][]time.Duration, len(work))
	var wg sync.WaitGroup
	start := time.Now()
	for c, reqs := range work {
		wg.Go(func() {
			for _, r := range reqs {
				t0 := time.Now()
				if err := send(c, r); err != nil {
					b.Error(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	return time.Since(start), slices.Concat(lat...)
}

func (env *httpEnv) post(c int, r request) error {
	if r.arrow == nil {
		res, err := env.clients[c].AppendNDJSON(context.Background(), "http", r.ndjson, nil)
		if err == nil && res.Stored != len(r.rows) {
			err = fmt.Errorf("stored %d of %d rows", res.Stored, len(r.rows))
		}
		return err
	}
	resp, err := env.arrowHTTP.Post(env.ts.URL+"/v1/shards/http/rows", server.ContentTypeArrow, bytes.NewReader(r.arrow))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("Arrow POST answered %d %s", resp.StatusCode, body)
	}
	return nil
}

func (env *httpEnv) appendLocal(r request) error {
	rows := make([]schema.Row, len(r.rows))
	for i, m := range r.rows {
		rows[i] = m
	}
	res, err := env.local.Append(context.Background(), rows, engine.Source{})
	if err == nil && res.Stored != len(rows) {
		err = fmt.Errorf("stored %d of %d rows in-process", res.Stored, len(rows))
	}
	return err
}

// ndjsonBody encodes rows as NDJSON, a JSON object a line.
func ndjsonBody(b *testing.B, rows []map[string]any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			b.Fatal(err)
		}
	}
	return buf.Bytes()
}

var rolloutArrow = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "prompt", Type: arrow.BinaryTypes.String},
	{Name: "completion", Type: arrow.BinaryTypes.String},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64},
	{Name: "metadata", Type: arrow.BinaryTypes.String},
}, nil)

// arrowBody encodes rollout rows as one IPC stream of one record batch.
func arrowBody(b *testing.B, rows []map[string]any) []byte {
	rb := array.NewRecordBuilder(memory.DefaultAllocator, rolloutArrow)
	defer rb.Release()
	str := func(c int, v any) { rb.Field(c).(*array.StringBuilder).Append(v.(string)) }
	for _, r := range rows {
		str(0, r["id"])
		str(1, r["prompt"])
		str(2, r["completion"])
		rb.Field(3).(*array.Float64Builder).Append(r["reward"].(float64))
		str(4, r["metadata"])
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	return arrowtest.Stream(b, rolloutArrow, []arrow.RecordBatch{rec})
}
