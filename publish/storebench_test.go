package publish

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/vfs"
)

// BenchmarkMergeFromStore is a merge (publish) pass of mergeGens fresh
// generations of mergeRows rollout rows each (internal/rolloutgen:
// 200–2048-byte payloads) of one shard into the base, lookup-free,
// compaction off: Plan, Stage and Commit until the plan is empty. The
// generations are appended and flushed by the engine outside the timer;
// the base grows by mergeGens×mergeRows rows per op.
//
//	local         generations read from the shard's gen directory, base in
//	              the local data directory (no Options.Store) — the floor
//	file-store    generations uploaded by the engine's flush
//	              (engine.Options.Store) to a file:// store on the same disk
//	              and read from it; the base in that store
//	s3-versitygw  the same with a real versitygw on this machine
//	              (internal/s3test)
//
// Each reports rows/s, MB/s (logical row bytes: the string values and
// the reward), gen-MB/s (generation file bytes read), commit-share (the
// part of the pass spent in Commit: the Iceberg metadata and manifest
// writes) and, for the stores, req/GB (store requests of the pass —
// creates, opens, ranged reads, stats, lists, deletes — per 10⁹
// generation bytes) and x-local (rows/s over the local subject's in the
// same run). Where versitygw cannot be built, s3-versitygw is skipped,
// not failed.
func BenchmarkMergeFromStore(b *testing.B) {
	s3, skip := s3test.StartBench(b)
	var local float64
	for _, name := range []string{"local", "file-store", "s3-versitygw"} {
		b.Run(name, func(b *testing.B) {
			var store *mergeReqStore
			switch name {
			case "file-store":
				store = openMergeStore(b, "file://"+b.TempDir(), objstore.Options{})
			case "s3-versitygw":
				if s3 == nil {
					b.Skip(skip)
				}
				tr := http.DefaultTransport.(*http.Transport).Clone()
				b.Cleanup(tr.CloseIdleConnections)
				store = openMergeStore(b, "s3://"+s3.Bucket(b)+"/lake", objstore.Options{
					Endpoint: s3.Endpoint(), Region: s3.Region(), PathStyle: true,
					AccessKey: s3.AccessKey(), SecretKey: s3.SecretKey(), HTTPClient: &http.Client{Transport: tr},
				})
			}
			rate := runMergeFromStore(b, store)
			if name == "local" {
				local = rate
			} else if local > 0 {
				b.ReportMetric(rate/local, "x-local")
			}
		})
	}
}

// The generations of one merge pass.
const (
	mergeGens = 8
	mergeRows = 2_500
)

// runMergeFromStore runs b.N passes (store nil: the local subject) and
// returns rows/s.
func runMergeFromStore(b *testing.B, store *mergeReqStore) float64 {
	ctx := b.Context()
	dir, table := b.TempDir(), tableName(b)
	eo := engine.Options{DataDir: dir, FS: vfs.Default, Table: table, Etcd: etcdClient,
		FlushBytes: 512 << 20, MemoryBudget: 1 << 30, FlushAge: -1, NoFlushOnClose: true, MaxBatchRows: 1 << 20}
	po := Options{Etcd: etcdClient, Prefix: "rollwal", Table: table, DataDir: dir, FS: vfs.Default,
		MemoryBudget: 1 << 30, Compaction: Compaction{Disabled: true}}
	if store != nil {
		eo.Store, po.Store = store, store
	}
	h, err := engine.NewHost(eo)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(ctx)
	s, err := h.Open(ctx, "s0")
	if err != nil {
		b.Fatal(err)
	}
	c, err := New(ctx, po)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	gen := rolloutgen.New(16, "merge")
	var passTime, commitTime time.Duration
	var logical, fileBytes, requests int64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for range mergeGens {
			rows := gen.Rows(mergeRows)
			logical += rowBytes(rows)
			if _, err := s.Append(ctx, rows, engine.Source{}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
		m := s.Manifest()
		for _, g := range m.Flushed[len(m.Flushed)-mergeGens:] {
			fileBytes += g.Bytes
		}
		before := store.requests()
		b.StartTimer()

		began := time.Now()
		var staged int64
		for {
			p, err := c.Plan(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if p.Empty() {
				break
			}
			st, err := c.Stage(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			committing := time.Now()
			if err := c.Commit(ctx, st); err != nil {
				b.Fatal(err)
			}
			commitTime += time.Since(committing)
			staged += st.RowsStaged
		}
		passTime += time.Since(began)

		b.StopTimer()
		requests += store.requests() - before
		if staged != mergeGens*mergeRows {
			b.Fatalf("the pass staged %d rows, want %d", staged, mergeGens*mergeRows)
		}
		b.StartTimer()
	}
	b.StopTimer()
	secs := passTime.Seconds()
	rate := float64(b.N*mergeGens*mergeRows) / secs
	b.ReportMetric(rate, "rows/s")
	b.ReportMetric(float64(logical)/secs/1e6, "MB/s")
	b.ReportMetric(float64(fileBytes)/secs/1e6, "gen-MB/s")
	b.ReportMetric(commitTime.Seconds()/secs, "commit-share")
	if store != nil {
		b.ReportMetric(float64(requests)/(float64(fileBytes)/1e9), "req/GB")
	}
	return rate
}

// rowBytes is the logical size of rollout rows: their string values and
// the 8-byte reward.
func rowBytes(rows []schema.Row) int64 {
	var n int64
	for _, r := range rows {
		for _, v := range r {
			switch v := v.(type) {
			case string:
				n += int64(len(v))
			case float64:
				n += 8
			}
		}
	}
	return n
}

func openMergeStore(b *testing.B, url string, o objstore.Options) *mergeReqStore {
	st, err := objstore.Open(context.Background(), url, o)
	if err != nil {
		b.Fatal(err)
	}
	return &mergeReqStore{Store: st}
}

// mergeReqStore counts the requests made of a store: every call, and
// every ReadAt of an opened object (one ranged GET on S3).
type mergeReqStore struct {
	objstore.Store
	n atomic.Int64
}

// requests is the count so far; 0 for a nil store (the local subject).
func (s *mergeReqStore) requests() int64 {
	if s == nil {
		return 0
	}
	return s.n.Load()
}

func (s *mergeReqStore) Create(ctx context.Context, name string, r io.ReaderAt, size int64) error {
	s.n.Add(1)
	return s.Store.Create(ctx, name, r, size)
}

func (s *mergeReqStore) Open(ctx context.Context, name string) (objstore.Object, error) {
	s.n.Add(1)
	obj, err := s.Store.Open(ctx, name)
	if err != nil {
		return obj, err
	}
	return countingObject{Object: obj, reads: &s.n}, nil
}

func (s *mergeReqStore) Stat(ctx context.Context, name string) (objstore.Info, error) {
	s.n.Add(1)
	return s.Store.Stat(ctx, name)
}

func (s *mergeReqStore) List(ctx context.Context, prefix string) ([]objstore.Info, error) {
	s.n.Add(1)
	return s.Store.List(ctx, prefix)
}

func (s *mergeReqStore) Delete(ctx context.Context, name string) error {
	s.n.Add(1)
	return s.Store.Delete(ctx, name)
}
