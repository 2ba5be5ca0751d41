package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/vfs"
)

// The merge reading shard generations from an object store
// (Options.Store): every test here puts its generations in the store only
// — written with generation.Write into a directory of their own, uploaded
// under generation.ObjectKey, the local copies deleted — so a Stage that
// read the data directory would find nothing.

// storeBackend opens an empty store of one kind; srv is the versitygw
// behind an s3:// store (nil for file://).
type storeBackend struct {
	name string
	open func(t *testing.T) (objstore.Store, *s3test.Server)
}

var storeBackends = []storeBackend{
	{"file", func(t *testing.T) (objstore.Store, *s3test.Server) {
		s, err := objstore.Open(context.Background(), "file:///store", objstore.Options{FS: vfs.NewStrictMem()})
		if err != nil {
			t.Fatal(err)
		}
		return s, nil
	}},
	{"s3", func(t *testing.T) (objstore.Store, *s3test.Server) {
		srv := s3test.Start(t)
		return openS3Store(t, srv), srv
	}},
}

// openS3Store opens a store on a new bucket of srv, with short retries so
// that a stopped server fails a pass quickly.
func openS3Store(t *testing.T, srv *s3test.Server) objstore.Store {
	return openS3StoreWith(t, srv, nil)
}

func openS3StoreWith(t *testing.T, srv *s3test.Server, reg prometheus.Registerer) objstore.Store {
	s, _ := openS3StoreVia(t, srv, reg, 0)
	return s
}

// openS3StoreVia opens a store whose PUT answers the returned transport
// can slow down; attempt bounds each request (0: none).
func openS3StoreVia(t *testing.T, srv *s3test.Server, reg prometheus.Registerer, attempt time.Duration) (objstore.Store, *s3test.SlowAnswers) {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	slow := &s3test.SlowAnswers{Next: tr}
	s, err := objstore.Open(context.Background(), "s3://"+srv.Bucket(t)+"/lake", objstore.Options{
		Endpoint: srv.Endpoint(), Region: srv.Region(), PathStyle: true,
		AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), AttemptTimeout: attempt,
		HTTPClient: &http.Client{Transport: slow}, MaxAttempts: 3, Backoff: 5 * time.Millisecond, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, slow
}

func withStore(s objstore.Store) func(*Options) { return func(o *Options) { o.Store = s } }

// storedGen is one generation put in the store: its object name and bytes.
type storedGen struct {
	key  string
	data []byte
}

// putStoredGenerations writes generations 1..len(sizes) of shard (epoch 1;
// generation i holds sizes[i-1] rows with ids <shard>-<i>-<n>), uploads each
// to store under generation.ObjectKey, deletes the local file, and makes
// them the shard manifest's flushed generations. It returns the objects.
func (e *env) putStoredGenerations(store objstore.Store, shard string, sizes ...int) []storedGen {
	e.t.Helper()
	dir := e.t.TempDir()
	m := &shardmeta.Manifest{Version: shardmeta.ManifestVersion, WriterEpoch: 1, CurrentGeneration: uint64(len(sizes)) + 1,
		Epochs: []shardmeta.EpochRecord{{Epoch: 1, StartGeneration: 1}}}
	var out []storedGen
	seq := uint64(1)
	for i, n := range sizes {
		num := uint64(i + 1)
		rows := make([]schema.Row, n)
		d := generation.Data{}
		for j := range rows {
			id := shard + "-" + strconv.Itoa(i+1) + "-" + strconv.Itoa(j)
			rows[j] = schema.Row{"id": id, "prompt": "p " + id, "completion": "c", "reward": float64(j)}
			e.ids[id] = true
			d.Seq, d.Epoch = append(d.Seq, seq), append(d.Epoch, 1)
			seq++
		}
		b, err := schema.Rollout().Build(rows)
		if err != nil {
			e.t.Fatal(err)
		}
		d.Rows = b
		f, err := generation.Write(e.ctx, generation.Options{FS: vfs.Default}, dir, schema.Rollout(),
			generation.Meta{Table: e.table, Shard: shard, Generation: num, Epoch: 1}, d)
		if err != nil {
			e.t.Fatal(err)
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			e.t.Fatal(err)
		}
		key := generation.ObjectKey(e.table, shard, f.Name)
		if err := store.Create(e.ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
			e.t.Fatal(err)
		}
		if err := os.Remove(f.Path); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, storedGen{key: key, data: data})
		m.Flushed = append(m.Flushed, shardmeta.Generation{Number: num, File: f.Name, Rows: f.Meta.Rows, Bytes: f.Size,
			SeqFirst: f.Meta.SeqFirst, SeqLast: f.Meta.SeqLast, Epoch: 1})
		m.ReplayCursor = f.Meta.SeqLast
	}
	e.putManifest(shard, m)
	return out
}

// noLocalGenerations fails the test if the data directory holds a gen
// directory: the generations must be in the store only.
func (e *env) noLocalGenerations() {
	e.t.Helper()
	for _, shard := range []string{"s0", "s1"} {
		dir := filepath.Join(e.dir, e.table, "shards", shard, "gen")
		if _, err := e.fs.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			e.t.Fatalf("%s exists (err %v): the generations must be in the store only", dir, err)
		}
	}
}

// wantNothingCommitted: the base is still empty.
func (e *env) wantNothingCommitted(what string) {
	e.t.Helper()
	st, _ := e.state()
	if st.Version != 0 {
		e.t.Fatalf("%s: the pass committed (base version %d)", what, st.Version)
	}
	// With the base in the store (whose server may be down) the state
	// alone says; a local base is checked for files too.
	if e.store == nil && len(e.baseFiles()) != 0 {
		e.t.Fatalf("%s: the pass committed %d files", what, len(e.baseFiles()))
	}
}

// TestStageReadsGenerationsFromStore: with Options.Store, RunOnce
// publishes generations that exist only in the store, every row exactly
// once, and a second pass finds nothing more to do.
func TestStageReadsGenerationsFromStore(t *testing.T) {
	for _, b := range storeBackends {
		t.Run(b.name, func(t *testing.T) {
			e := newMemEnv(t)
			store, _ := b.open(t)
			e.putStoredGenerations(store, "s0", 10, 7, 12)
			e.putStoredGenerations(store, "s1", 5, 9)
			e.noLocalGenerations()
			c := e.coordinator(withStore(store))
			r := e.runOnce(c)
			if r.RowsStaged != 43 || r.Generations != 5 {
				t.Fatalf("RunOnce staged %d rows of %d generations, want 43 of 5", r.RowsStaged, r.Generations)
			}
			e.wantAllIDs()
			st, _ := e.state()
			if st.Shards["s0"].Watermark != 3 || st.Shards["s1"].Watermark != 2 {
				t.Fatalf("watermarks s0=%d s1=%d, want 3 and 2", st.Shards["s0"].Watermark, st.Shards["s1"].Watermark)
			}
			if r := e.runOnce(c); r.RowsStaged != 0 || r.Passes != 0 {
				t.Fatalf("second RunOnce: %+v, want nothing to do", r)
			}
			e.wantAllIDs()
		})
	}
}

// TestStageMissingObjectFailsThePass: a generation the manifest names but
// the store lacks fails the pass with an error naming the shard, the
// generation and the object, wrapping objstore.ErrNotFound; nothing is
// committed. Once the object is there the next pass publishes every row
// once.
func TestStageMissingObjectFailsThePass(t *testing.T) {
	for _, b := range storeBackends {
		t.Run(b.name, func(t *testing.T) {
			e := newMemEnv(t)
			store, _ := b.open(t)
			gens := e.putStoredGenerations(store, "s0", 10, 10, 10)
			lost := gens[1]
			if err := store.Delete(e.ctx, lost.key); err != nil {
				t.Fatal(err)
			}
			c := e.coordinator(withStore(store))
			_, err := c.RunOnce(e.ctx)
			if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), objectURL(store, lost.key)) ||
				!strings.Contains(err.Error(), `shard "s0" generation 2`) || !strings.Contains(err.Error(), "missing from the store") {
				t.Fatalf("RunOnce with generation 2 missing from the store: %v, want ErrNotFound naming shard, generation and object %s",
					err, objectURL(store, lost.key))
			}
			t.Logf("the pass failed: %v", err)
			e.wantNothingCommitted("a generation missing")
			if err := store.Create(e.ctx, lost.key, bytes.NewReader(lost.data), int64(len(lost.data))); err != nil {
				t.Fatal(err)
			}
			if r := e.runOnce(c); r.RowsStaged != 30 {
				t.Fatalf("pass after the object is back staged %d rows, want 30", r.RowsStaged)
			}
			e.wantAllIDs()
		})
	}
}

// TestStageCorruptObjectIsCorrupt: a generation object whose bytes are
// damaged fails the pass with generation.ErrCorrupt naming the object —
// the checks of a local file hold for an object — and nothing is
// committed.
func TestStageCorruptObjectIsCorrupt(t *testing.T) {
	e := newMemEnv(t)
	store, _ := storeBackends[0].open(t)
	gens := e.putStoredGenerations(store, "s0", 10, 10)
	bad := gens[1]
	damaged := bytes.Clone(bad.data)
	damaged[len(damaged)-1] ^= 0xff // the trailing magic
	if err := store.Delete(e.ctx, bad.key); err != nil {
		t.Fatal(err)
	}
	if err := store.Create(e.ctx, bad.key, bytes.NewReader(damaged), int64(len(damaged))); err != nil {
		t.Fatal(err)
	}
	c := e.coordinator(withStore(store))
	_, err := c.RunOnce(e.ctx)
	if !errors.Is(err, generation.ErrCorrupt) || !strings.Contains(err.Error(), objectURL(store, bad.key)) {
		t.Fatalf("RunOnce with a damaged object: %v, want ErrCorrupt naming %s", err, objectURL(store, bad.key))
	}
	e.wantNothingCommitted("a damaged object")
	if err := store.Delete(e.ctx, bad.key); err != nil {
		t.Fatal(err)
	}
	if err := store.Create(e.ctx, bad.key, bytes.NewReader(bad.data), int64(len(bad.data))); err != nil {
		t.Fatal(err)
	}
	e.runOnce(c)
	e.wantAllIDs()
}

// stopAfterOpen is a store whose first Open of a name ending in suffix
// stops the server once the object is open, so that its reads fail: the
// store going down in the middle of a merge.
type stopAfterOpen struct {
	objstore.Store
	srv    *s3test.Server
	suffix string
	once   sync.Once
}

func (s *stopAfterOpen) Open(ctx context.Context, name string) (objstore.Object, error) {
	obj, err := s.Store.Open(ctx, name)
	if err == nil && strings.HasSuffix(name, s.suffix) {
		s.once.Do(func() {
			if err := s.srv.Stop(); err != nil {
				panic(err)
			}
		})
	}
	return obj, err
}

// TestStageStoreDownFailsThePass: versitygw stopped before a pass fails it
// with an error naming the operation (open) and the object; stopped between
// opening a generation and reading it, with one naming the read and the
// object, not ErrCorrupt (a store that is down is not a damaged file).
// Nothing is committed; after a restart the next pass publishes every row
// once.
func TestStageStoreDownFailsThePass(t *testing.T) {
	t.Run("before the pass", func(t *testing.T) {
		e := newMemEnv(t)
		srv := s3test.Start(t)
		store := openS3Store(t, srv)
		gens := e.putStoredGenerations(store, "s0", 10, 10)
		c := e.coordinator(withStore(store))
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		_, err := c.RunOnce(e.ctx)
		want := "objstore: open " + objectURL(store, gens[0].key)
		if err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, generation.ErrCorrupt) || errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("RunOnce with the store down: %v, want an error containing %q", err, want)
		}
		t.Logf("the pass failed: %v", err)
		e.wantNothingCommitted("the store down")
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if r := e.runOnce(c); r.RowsStaged != 20 {
			t.Fatalf("pass after the restart staged %d rows, want 20", r.RowsStaged)
		}
		e.wantAllIDs()
	})
	t.Run("mid-read", func(t *testing.T) {
		e := newMemEnv(t)
		srv := s3test.Start(t)
		store := openS3Store(t, srv)
		gens := e.putStoredGenerations(store, "s0", 10, 10, 10)
		victim := gens[1].key
		c := e.coordinator(withStore(&stopAfterOpen{Store: store, srv: srv, suffix: victim}))
		_, err := c.RunOnce(e.ctx)
		want := "objstore: read " + objectURL(store, victim)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `shard "s0" generation 2`) ||
			errors.Is(err, generation.ErrCorrupt) {
			t.Fatalf("RunOnce with the store stopped mid-read: %v, want an I/O error containing %q", err, want)
		}
		t.Logf("the pass failed: %v", err)
		e.wantNothingCommitted("the store stopped mid-read")
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if r := e.runOnce(c); r.RowsStaged != 30 {
			t.Fatalf("pass after the restart staged %d rows, want 30", r.RowsStaged)
		}
		e.wantAllIDs()
	})
}

// TestStageFetchesAGenerationInFewRequests: a generation object is read in
// fetchChunk-sized ranged GETs (here one, after the HEAD of Open), not in
// parquet-go's small reads, which cost a GET each on S3 (about 18 for
// each of these 2,000-row generations). The base is in the store too, so
// only the requests for generation objects are counted: on S3 each Open
// is one HEAD and each ReadAt one GET. A generation the copy path declines
// (here: the base is in another codec) is decoded from the object the
// copy fetched, not fetched again.
func TestStageFetchesAGenerationInFewRequests(t *testing.T) {
	srv := s3test.Start(t)
	for _, codec := range []string{generation.CodecSnappy, generation.CodecZstd} {
		t.Run(codec, func(t *testing.T) {
			e := newMemEnv(t)
			store := &genCountingStore{Store: openS3Store(t, srv), prefix: e.table + "/shards/"}
			e.putStoredGenerations(store, "s0", 2000, 2000)
			s := stagePlan(t, e, e.coordinator(withStore(store), func(o *Options) { o.Codec = codec }), false)
			if gets, heads := store.reads.Load(), store.opens.Load(); gets != 2 || heads != 2 {
				t.Fatalf("staging 2 generations took %v GETs and %v HEADs of generation objects, want 2 and 2", gets, heads)
			}
			if want := map[string]int{generation.CodecSnappy: 2}[codec]; s.Copied != want || s.RowsStaged != 4000 {
				t.Fatalf("copied %d generations and staged %d rows, want %d and 4000", s.Copied, s.RowsStaged, want)
			}
		})
	}
}

// genCountingStore counts the Opens and ReadAts of objects under prefix.
type genCountingStore struct {
	objstore.Store
	prefix       string
	opens, reads atomic.Int64
}

func (s *genCountingStore) Open(ctx context.Context, name string) (objstore.Object, error) {
	obj, err := s.Store.Open(ctx, name)
	if err != nil || !strings.HasPrefix(name, s.prefix) {
		return obj, err
	}
	s.opens.Add(1)
	return countingObject{Object: obj, reads: &s.reads}, nil
}

type countingObject struct {
	objstore.Object
	reads *atomic.Int64
}

func (o countingObject) ReadAt(p []byte, off int64) (int, error) {
	o.reads.Add(1)
	return o.Object.ReadAt(p, off)
}

// chunkObject is an in-memory Object that records its reads and may hold
// fewer bytes than its Size says.
type chunkObject struct {
	data  []byte
	size  int64
	reads []int
}

func (o *chunkObject) ReadAt(p []byte, off int64) (int, error) {
	o.reads = append(o.reads, len(p))
	if off >= int64(len(o.data)) {
		return 0, io.EOF
	}
	n := copy(p, o.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (o *chunkObject) Size() int64  { return o.size }
func (o *chunkObject) Close() error { return nil }

// TestFetchObject: whole objects in fetchChunk reads; an object shorter
// than its Size comes back short (the generation checks then refuse it as
// truncated), never padded.
func TestFetchObject(t *testing.T) {
	data := make([]byte, 2*fetchChunk+100)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name  string
		held  int
		size  int64
		reads []int
	}{
		{"empty", 0, 0, nil},
		{"small", 100, 100, []int{100}},
		{"three chunks", len(data), int64(len(data)), []int{fetchChunk, fetchChunk, 100}},
		{"exactly one chunk", fetchChunk, fetchChunk, []int{fetchChunk}},
		{"shorter than its size", fetchChunk + 5, int64(len(data)), []int{fetchChunk, fetchChunk}},
	} {
		o := &chunkObject{data: data[:tc.held], size: tc.size}
		got, err := fetchObject(o)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(got, data[:tc.held]) || fmt.Sprint(o.reads) != fmt.Sprint(tc.reads) {
			t.Fatalf("%s: %d bytes in reads %v, want %d in %v", tc.name, len(got), o.reads, tc.held, tc.reads)
		}
	}
}
