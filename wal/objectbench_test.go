package wal

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

// BenchmarkObjectWALAck measures the acknowledgement latency of the WAL on
// an object store (ObjectWAL) next to the local WAL measured in the same
// run: ackProducers goroutines each Append one 4 KiB record (seeded
// compressible text with random bytes sprinkled in, uncompressed WAL) and
// wait for SyncTo of its position; the time from before Append to
// SyncTo's return is one acknowledgement. b.N is the records of all
// producers together.
//
//	local         the local WAL in a directory on the OS filesystem
//	              (BENCH_DIR, or the temporary directory): one fdatasync
//	              per group commit — the peer
//	file-store    the object WAL on a file:// store in a directory of the
//	              same filesystem: one create (temporary file, fsync,
//	              link) per group commit
//	s3-versitygw  the object WAL on a real versitygw on this machine
//	              (internal/s3test): one PUT with If-None-Match per group
//	              commit
//
// Each reports rows/s, MB/s (payload bytes), p50-us and p99-us of the
// acknowledgements, req/GB (fdatasyncs of the local WAL, store creates of
// the object WAL, per 10⁹ payload bytes) and rows/req (records per
// group commit: how well the group commit groups). The object WAL rows
// also report lat-vs-local (their p50 over the local WAL's) and x-local
// (their rows/s over the local WAL's), both against the local WAL of the
// same run. versitygw is built once per machine (a minute or more cold);
// where it cannot be built, s3-versitygw is skipped, not failed.
func BenchmarkObjectWALAck(b *testing.B) {
	payloads := ackPayloads(256, 4<<10)
	dir := benchDir(b)
	s3, skip := s3test.StartBench(b)
	var local ackResult
	for _, name := range []string{"local", "file-store", "s3-versitygw"} {
		b.Run(name, func(b *testing.B) {
			var r ackResult
			switch name {
			case "local":
				w, err := Open(testOptions(vfs.Default, 1, func(o *Options) {
					o.Dir = filepath.Join(dir, fmt.Sprintf("ackwal-%d", benchRun.Add(1)))
				}))
				if err != nil {
					b.Fatal(err)
				}
				r = runAck(b, w, payloads)
				r.requests = counterValue(w.m.syncs)
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			case "file-store":
				r = runObjectAck(b, openAckStore(b, "file://"+filepath.Join(dir, fmt.Sprintf("ackstore-%d", benchRun.Add(1))),
					objstore.Options{}), payloads)
			case "s3-versitygw":
				if s3 == nil {
					b.Skip(skip)
				}
				tr := http.DefaultTransport.(*http.Transport).Clone()
				b.Cleanup(tr.CloseIdleConnections)
				r = runObjectAck(b, openAckStore(b, "s3://"+s3.Bucket(b)+"/wal", objstore.Options{
					Endpoint: s3.Endpoint(), Region: s3.Region(), PathStyle: true,
					AccessKey: s3.AccessKey(), SecretKey: s3.SecretKey(), HTTPClient: &http.Client{Transport: tr},
				}), payloads)
			}
			r.report(b)
			if name == "local" {
				local = r
			} else if local.p50 > 0 && local.rate > 0 {
				b.ReportMetric(float64(r.p50)/float64(local.p50), "lat-vs-local")
				b.ReportMetric(r.rate/local.rate, "x-local")
			}
		})
	}
}

// ackProducers is the number of concurrent producers.
const ackProducers = 8

func openAckStore(b *testing.B, url string, o objstore.Options) *ackStore {
	st, err := objstore.Open(context.Background(), url, o)
	if err != nil {
		b.Fatal(err)
	}
	return &ackStore{Store: st}
}

// ackStore counts the creates of a store.
type ackStore struct {
	objstore.Store
	creates atomic.Int64
}

func (s *ackStore) Create(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	s.creates.Add(1)
	return s.Store.Create(ctx, name, r, size)
}

func runObjectAck(b *testing.B, st *ackStore, payloads [][]byte) ackResult {
	w, err := OpenObjects(context.Background(), ObjectOptions{Store: st, Prefix: "t/shards/s0/wal/", Epoch: 1})
	if err != nil {
		b.Fatal(err)
	}
	r := runAck(b, w, payloads)
	r.requests = float64(st.creates.Load())
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	return r
}

// ackWAL is what the producers use of either WAL.
type ackWAL interface {
	Append(gen uint64, count uint32, payload []byte) (uint64, error)
	SyncTo(pos uint64) error
}

// ackResult is one subject's run.
type ackResult struct {
	rows     int
	bytes    int64
	secs     float64
	rate     float64 // rows/s
	p50, p99 time.Duration
	requests float64 // fdatasyncs or creates, filled in by the caller
}

// runAck runs b.N records through w from ackProducers producers, each
// timing Append + SyncTo of its own record.
func runAck(b *testing.B, w ackWAL, payloads [][]byte) ackResult {
	var next, total atomic.Int64
	lats := make([][]time.Duration, ackProducers)
	var wg sync.WaitGroup
	b.ResetTimer()
	for p := range ackProducers {
		wg.Go(func() {
			for {
				row := int(next.Add(1)) - 1
				if row >= b.N {
					return
				}
				payload := payloads[row%len(payloads)]
				began := time.Now()
				pos, err := w.Append(1, 1, payload)
				if err == nil {
					err = w.SyncTo(pos)
				}
				if err != nil {
					b.Error(err)
					return
				}
				lats[p] = append(lats[p], time.Since(began))
				total.Add(int64(len(payload)))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(lats...)
	slices.Sort(all)
	r := ackResult{rows: len(all), bytes: total.Load(), secs: b.Elapsed().Seconds()}
	if r.rows > 0 {
		r.p50, r.p99 = ackQuantile(all, 0.50), ackQuantile(all, 0.99)
	}
	r.rate = float64(r.rows) / r.secs
	return r
}

// ackQuantile is the q-quantile of sorted, by nearest rank.
func ackQuantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func (r ackResult) report(b *testing.B) {
	b.ReportMetric(r.rate, "rows/s")
	b.ReportMetric(float64(r.bytes)/r.secs/1e6, "MB/s")
	b.ReportMetric(float64(r.p50.Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(r.p99.Nanoseconds())/1e3, "p99-us")
	if r.requests > 0 {
		b.ReportMetric(r.requests/(float64(r.bytes)/1e9), "req/GB")
		b.ReportMetric(float64(r.rows)/r.requests, "rows/req")
	}
}

// ackPayloads returns n seeded payloads of size bytes.
func ackPayloads(n, size int) [][]byte {
	rng := rand.New(rand.NewPCG(42, uint64(size)))
	out := make([][]byte, n)
	for i := range out {
		out[i] = textPayload(rng, size)
	}
	return out
}
