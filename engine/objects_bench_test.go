package engine

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

// BenchmarkFlushToStore flushes generations of the same rollout rows to
// the data directory alone (the floor), and with each uploaded to a
// file:// store on the same disk and to a real versitygw on this machine.
// Each op appends 20,000 rows and flushes them; the appends are off the
// clock. It reports rows/s and MB/s of generation bytes.
func BenchmarkFlushToStore(b *testing.B) {
	srv, skip := s3test.StartBench(b)
	for _, name := range []string{"local", "file-store", "s3-versitygw"} {
		b.Run(name, func(b *testing.B) {
			opts := testOptions(vfs.Default, tableName(b, ""))
			opts.DataDir, opts.FlushBytes, opts.MemoryBudget = b.TempDir(), 1<<30, 1<<30
			switch name {
			case "file-store":
				opts.Store = openBenchStore(b, "file://"+b.TempDir(), objstore.Options{})
			case "s3-versitygw":
				if srv == nil {
					b.Skip(skip)
				}
				tr := http.DefaultTransport.(*http.Transport).Clone()
				b.Cleanup(tr.CloseIdleConnections)
				opts.Store = openBenchStore(b, "s3://"+srv.Bucket(b)+"/t", objstore.Options{
					Endpoint: srv.Endpoint(), Region: srv.Region(), PathStyle: true,
					AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), HTTPClient: &http.Client{Transport: tr},
				})
			}
			benchFlush(b, opts)
		})
	}
}

func openBenchStore(b *testing.B, url string, o objstore.Options) objstore.Store {
	st, err := objstore.Open(context.Background(), url, o)
	if err != nil {
		b.Fatal(err)
	}
	return st
}

func benchFlush(b *testing.B, opts Options) {
	ctx := context.Background()
	h := openHost(b, opts)
	defer h.Close(ctx)
	s := mustOpen(b, h, "s0")
	const n = 20_000
	var flushed time.Duration
	var bytes int64
	for i := range b.N {
		for j := 0; j < n; j += 500 {
			if _, err := s.Append(ctx, rows("r"+itoa(i), j, 500), Source{}); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		if _, err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		flushed += time.Since(start)
		m := s.Manifest()
		bytes += m.Flushed[len(m.Flushed)-1].Bytes
	}
	b.ReportMetric(float64(n*b.N)/flushed.Seconds(), "rows/s")
	b.ReportMetric(float64(bytes)/1e6/flushed.Seconds(), "MB/s")
	b.ReportMetric(0, "ns/op")
}
