package engine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/internal/etcdcluster"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// TestZombieWriterCannotCommit: writer A holds shard s0 through etcd member
// 0 only; an append of A stalls after its lease check, as a paused process
// would. Member 0 is then SIGSTOPped, cutting A's keepalives; B, talking to
// the other members, claims once A's lease expires and commits. When A's
// stalled append resumes it writes its WAL record but acknowledges nothing;
// later appends and flushes of A are refused; the manifest stays B's; and
// A's late WAL record never reappears through any number of restarts of B.
func TestZombieWriterCannotCommit(t *testing.T) { zombieCannotCommit(t, WALLocal) }

// TestObjectWALZombieCannotLand is TestZombieWriterCannotCommit with the
// WAL in an object store and A and B on separate data directories (two
// machines sharing etcd and the bucket): the zombie's late record becomes
// an object of its epoch, created after B's claim, that no replay of B's
// reads.
func TestObjectWALZombieCannotLand(t *testing.T) { zombieCannotCommit(t, WALObject) }

func zombieCannotCommit(t *testing.T, backend WALBackend) {
	ctx := context.Background()
	cl := etcdcluster.Start(t, etcdcluster.Options{})
	dir := t.TempDir()
	table := tableName(t, "")
	var store objstore.Store
	if backend == WALObject {
		var err error
		if store, err = objstore.Open(ctx, "file://"+filepath.Join(dir, "bucket"), objstore.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := func(cli *clientv3.Client, name string) Options {
		o := Options{
			DataDir: dir, FS: vfs.Default, Table: table, Etcd: cli, WriterID: name,
			LeaseTTL: 2 * time.Second, RequestTimeout: time.Second, FlushAge: -1,
			WALBackend: backend, Store: store,
		}
		if backend == WALObject {
			o.DataDir = filepath.Join(dir, name) // a machine of its own
		}
		return o
	}
	optsA := opts(cl.Client(t, cl.Endpoint(0)), "A")
	stall, stalled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var zombieAppend atomic.Bool
	optsA.testHookBeforeWrite = func() {
		if zombieAppend.Load() {
			once.Do(func() { close(stalled); <-stall })
		}
	}
	a := openHost(t, optsA)
	t.Cleanup(func() { a.Close(ctx) })
	release := sync.OnceFunc(func() { close(stall) })
	t.Cleanup(release) // runs first: a failing test must not leave A stalled
	sa := mustOpen(t, a, "s0")
	mustAppend(t, sa, rows("a-flushed", 0, 50))
	if _, err := sa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, sa, rows("a-wal", 0, 20))

	zombieAppend.Store(true)
	zombieErr := make(chan error, 1)
	go func() {
		_, err := sa.Append(ctx, rows("zombie", 0, 100), Source{})
		zombieErr <- err
	}()
	<-stalled
	if err := cl.Pause(0); err != nil {
		t.Fatal(err)
	}

	optsB := opts(cl.Client(t, cl.Endpoint(1), cl.Endpoint(2)), "B")
	optsB.NoFlushOnClose = true
	b := openHost(t, optsB)
	sb := mustOpen(t, b, "s0") // waits for A's owner key to expire
	if sb.Epoch() != 2 {
		t.Fatalf("B claimed epoch %d, want 2", sb.Epoch())
	}
	// B does not flush: its generation stays the one the zombie tags its
	// late record with, so only the start-position rule can exclude it.
	mustAppend(t, sb, rows("b", 0, 30))
	manifestB := sb.Manifest()

	tailBefore := sa.Status().WALTail
	release()
	if err := <-zombieErr; !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("the zombie's stalled append: %v; want an unacknowledged outcome", err)
	}
	if tail := sa.Status().WALTail; tail != tailBefore+100 {
		t.Fatalf("the zombie's WAL tail went %d→%d; want its late record of 100 rows written", tailBefore, tail)
	}
	if backend == WALObject {
		checkZombieObject(t, store, table, manifestB)
	}
	if _, err := sa.Append(ctx, rows("zombie-later", 0, 5), Source{}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a later append of the zombie: %v; want ErrFenced", err)
	}
	if _, err := sa.Flush(ctx); err == nil {
		t.Fatal("the zombie flushed")
	}
	if err := cl.Resume(0); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Flush(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("the zombie's flush after its member is back: %v; want ErrFenced", err)
	}
	a.Close(ctx)
	m, err := LoadManifest(ctx, optsB.Etcd, "", table, "s0")
	if err != nil {
		t.Fatal(err)
	}
	if !m.Equal(manifestB) {
		t.Fatalf("the manifest changed after B's commit:\n%+v\nwant\n%+v", m, manifestB)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}

	for restart := range 3 {
		checkZombieGone(t, optsB, restart)
	}
}

// checkZombieObject fails unless the store holds an object of epoch 1
// (the zombie's) whose first position is above epoch 2's start: the late
// record landed, and only the replay rule keeps it out.
func checkZombieObject(t *testing.T, store objstore.Store, table string, m *shardmeta.Manifest) {
	t.Helper()
	start := m.Epochs[len(m.Epochs)-1].StartPosition
	infos, err := store.List(context.Background(), table+"/shards/s0/wal/")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		var epoch, first, last uint64
		if _, err := fmt.Sscanf(path.Base(in.Name), "%d-%d-%d.wal", &epoch, &first, &last); err == nil && epoch == 1 && first > start {
			t.Logf("the zombie's late object %s, above epoch 2's start %d", in.Name, start)
			return
		}
	}
	t.Fatalf("no object of epoch 1 above epoch 2's start %d among %v", start, infos)
}

// checkZombieGone reopens the shard and checks that every acknowledged row
// is there once and no row of the zombie's late append is.
func checkZombieGone(t *testing.T, opts Options, restart int) {
	ctx := context.Background()
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	inGen, _ := committed(t, vfs.Default, opts, "s0")
	inMem := memtableIDs(s)
	counts := map[string]int{}
	for id, n := range inGen {
		counts[id] += n
	}
	for id, n := range inMem {
		counts[id] += n
	}
	for id, n := range counts {
		if strings.HasPrefix(id, "zombie") {
			t.Fatalf("restart %d: the zombie's late row %s reappeared", restart, id)
		}
		if n != 1 {
			t.Fatalf("restart %d: id %s present %d times", restart, id, n)
		}
	}
	if len(counts) != 100 {
		t.Fatalf("restart %d: %d ids, want the 100 acknowledged", restart, len(counts))
	}
}

func mustAppend(t *testing.T, s *Shard, batch []schema.Row) {
	t.Helper()
	if _, err := s.Append(context.Background(), batch, Source{}); err != nil {
		t.Fatal(err)
	}
}
