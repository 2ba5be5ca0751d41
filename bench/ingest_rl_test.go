package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/internal/rolloutgen"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/wal"
)

// rlBatch is the rows of one append of realistic RL rows (about 24 KB
// each: 3,300 tokens, their log-probabilities, 8 messages).
const rlBatch = 8

// BenchmarkIngestRL is BenchmarkIngest with realistic RL rows
// (rolloutgen.RLRows: token ids as list<int32>, log-probabilities as
// list<float32>, chat messages as list<struct>): 4 producers append
// batches of 8 rows through the WAL into memtables, flushed into
// generations and committed. In the same op, off the clock, a bare
// parquet-go GenericWriter writes the same rows with the same types to a
// file, so that x-parquet-go (ingest rows/s over the bare writer's) is
// measured on one machine state.
//
//	rows/s, MB/s     ingest throughput (MB of values, 4 bytes a token)
//	x-parquet-go     ingest rows/s over the bare writer's (target ≥ 0.9)
//	disk-B/row       generation bytes per row
func BenchmarkIngestRL(b *testing.B) {
	for _, comp := range []wal.Compression{wal.None, wal.S2} {
		b.Run(fmt.Sprintf("producers=4/wal=%s", comp), func(b *testing.B) { benchIngestRL(b, 4, comp) })
	}
}

func benchIngestRL(b *testing.B, producers int, comp wal.Compression) {
	ctx := context.Background()
	sch := rolloutgen.RLSchema()
	h, err := engine.NewHost(engine.Options{
		DataDir: b.TempDir(), Table: fmt.Sprintf("benchrl%d", time.Now().UnixNano()), Etcd: etcdClient, Schema: sch,
		WALCompression: comp, FlushBytes: 64 << 20, MemoryBudget: 512 << 20, BudgetWait: time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(ctx)
	s, err := h.Open(ctx, "s0")
	if err != nil {
		b.Fatal(err)
	}
	pool, peers, valueBytes := prepareRL(b, sch, producers)
	b.SetBytes(valueBytes / int64(len(peers)) * rlBatch)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < b.N; i += producers {
				if _, err := s.AppendBatch(ctx, withIDs(pool[i%len(pool)], p, i), engine.Source{}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	rows := float64(b.N * rlBatch)
	peer := writeRLPeer(b, peers, b.N*rlBatch)
	b.ReportMetric(rows/elapsed.Seconds(), "rows/s")
	b.ReportMetric(rows/peer.Seconds(), "peer-rows/s")
	b.ReportMetric(peer.Seconds()/elapsed.Seconds(), "x-parquet-go")
	var genBytes, genRows int64
	for _, g := range s.Status().Flushed {
		genBytes, genRows = genBytes+g.Bytes, genRows+g.Rows
	}
	if genRows > 0 {
		b.ReportMetric(float64(genBytes)/float64(genRows), "disk-B/row")
	}
}

// prepareRL builds a pool of validated batches and the same rows for the
// bare writer.
func prepareRL(b *testing.B, sch *schema.Schema, producers int) ([]*schema.Batch, []rolloutgen.RLPeerRow, int64) {
	g := rolloutgen.New(1, "rl")
	var pool []*schema.Batch
	var peers []rolloutgen.RLPeerRow
	var bytes int64
	for range 4 * producers {
		rows := g.RLRows(rlBatch)
		batch, err := sch.Build(rows)
		if err != nil {
			b.Fatal(err)
		}
		pool = append(pool, batch)
		for _, r := range rows {
			peers = append(peers, rolloutgen.RLPeer(r, uint64(len(peers)+1)))
			bytes += rolloutgen.RLValueBytes(r)
		}
	}
	return pool, peers, bytes
}

// writeRLPeer writes n rows (the pool's, over and over) with a bare
// parquet-go GenericWriter, snappy as the engine's default codec, fsynced,
// and returns how long it took.
func writeRLPeer(b *testing.B, peers []rolloutgen.RLPeerRow, n int) time.Duration {
	path := filepath.Join(b.TempDir(), "peer.parquet")
	start := time.Now()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w := parquet.NewGenericWriter[rolloutgen.RLPeerRow](f, parquet.Compression(&parquet.Snappy))
	for done := 0; done < n; {
		k := min(len(peers), n-done)
		if _, err := w.Write(peers[:k]); err != nil {
			b.Fatal(err)
		}
		done += k
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
