package etcdembed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func maintain(t *testing.T, srv *Server) Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := srv.Maintain(ctx)
	if err != nil {
		t.Fatalf("Maintain: %v", err)
	}
	return st
}

// overwrite puts n values of size bytes to one key: n revisions of history.
func overwrite(t *testing.T, cli *clientv3.Client, key string, n, size int) error {
	t.Helper()
	v := strings.Repeat("x", size)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Put(ctx, key, v)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// TestMaintenanceCompactsAndDefragments: a pass compacts to head −
// retention, defragments a database that is mostly free space, and reports
// the sizes in Stats and the registered gauges.
func TestMaintenanceCompactsAndDefragments(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	srv := start(t, Options{Dir: t.TempDir(), CompactionRetention: 10, DefragFloorBytes: 1 << 20,
		MaintenanceInterval: time.Hour, Registerer: reg, UnsafeNoFsync: true})
	defer srv.Close()
	cli := srv.Client()
	if err := overwrite(t, cli, "/k", 2000, 8<<10); err != nil {
		t.Fatal(err)
	}
	before := srv.Stats()
	st := maintain(t, srv)
	t.Logf("before %+v\nafter  %+v", before, st)
	if st.Compactions == 0 || st.CompactRevision != st.Revision-10 {
		t.Fatalf("no compaction to head-10: %+v", st)
	}
	if st.Defrags == 0 {
		t.Fatalf("a database of 16 MiB of history with 80 KiB live was not defragmented: %+v", st)
	}
	if st.DBBytes > 2<<20 || st.QuotaBytes != DefaultQuotaBytes {
		t.Fatalf("after compaction and defragment: %+v; want at most 2 MiB and the default quota", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "/k", clientv3.WithRev(st.CompactRevision-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the compaction: %v, want ErrCompacted", err)
	}
	for name, want := range map[string]float64{
		"writer_etcd_db_bytes": float64(st.DBBytes), "writer_etcd_db_in_use_bytes": float64(st.DBInUseBytes),
		"writer_etcd_quota_bytes": DefaultQuotaBytes, "writer_etcd_compact_revision": float64(st.CompactRevision),
	} {
		if got := gauge(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for name, want := range map[string]uint64{"writer_etcd_compactions_total": st.Compactions, "writer_etcd_defrags_total": st.Defrags} {
		if got := metric(t, reg, name).GetCounter().GetValue(); got != float64(want) {
			t.Errorf("%s = %v, want %d", name, got, want)
		}
	}
	// Nothing new: the next pass neither compacts nor defragments.
	if again := maintain(t, srv); again.Compactions != st.Compactions || again.Defrags != st.Defrags {
		t.Errorf("an idle pass did work: %+v", again)
	}
}

func gauge(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	return metric(t, reg, name).GetGauge().GetValue()
}

func metric(t *testing.T, reg prometheus.Gatherer, name string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0]
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// TestNoSpaceRecoversWithoutOperator: writes past the quota fail with
// "database space exceeded"; the next maintenance pass compacts,
// defragments and disarms the alarm, and writes succeed again.
func TestNoSpaceRecoversWithoutOperator(t *testing.T) {
	const quota = 16 << 20
	srv := start(t, Options{Dir: t.TempDir(), QuotaBytes: quota, CompactionRetention: 10,
		MaintenanceInterval: time.Hour, UnsafeNoFsync: true})
	defer srv.Close()
	cli := srv.Client()
	err := overwrite(t, cli, "/k", 10000, 16<<10)
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("writing 160 MiB against a 16 MiB quota: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	if err := overwrite(t, cli, "/k", 1, 10); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a write under the alarm: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	st := maintain(t, srv)
	t.Logf("after the pass: %+v", st)
	if st.NoSpaceAlarm || st.DBBytes >= quota/2 {
		t.Fatalf("after the pass: %+v; want the alarm disarmed and the database under half the quota", st)
	}
	if err := overwrite(t, cli, "/k", 100, 16<<10); err != nil {
		t.Fatalf("writes after the pass: %v", err)
	}
}

// The loop runs by itself and stops with Close (goleak in TestMain).
func TestMaintenanceLoopRunsAndStops(t *testing.T) {
	srv := start(t, Options{Dir: t.TempDir(), CompactionRetention: 5, MaintenanceInterval: 20 * time.Millisecond, UnsafeNoFsync: true})
	if err := overwrite(t, srv.Client(), "/k", 50, 10); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.Stats().CompactRevision < 40 {
		if time.Now().After(deadline) {
			t.Fatalf("the loop did not compact: %+v", srv.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCompactionDisabled(t *testing.T) {
	srv := start(t, Options{Dir: t.TempDir(), CompactionRetention: -1, MaintenanceInterval: time.Hour, UnsafeNoFsync: true})
	defer srv.Close()
	if err := overwrite(t, srv.Client(), "/k", 50, 10); err != nil {
		t.Fatal(err)
	}
	if st := maintain(t, srv); st.Compactions != 0 || st.CompactRevision != 0 {
		t.Fatalf("compaction disabled, yet: %+v", st)
	}
}
