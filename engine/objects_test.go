package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

// objectStores are the stores the engine's object tests run on: file://
// over its own strict in-memory filesystem, and a bucket of a real
// versitygw.
func objectStores(t *testing.T) map[string]func(t *testing.T) (objstore.Store, *s3test.Server) {
	return map[string]func(t *testing.T) (objstore.Store, *s3test.Server){
		"file": func(t *testing.T) (objstore.Store, *s3test.Server) { return memStore(t), nil },
		"s3": func(t *testing.T) (objstore.Store, *s3test.Server) {
			srv := s3test.Start(t)
			tr := http.DefaultTransport.(*http.Transport).Clone()
			t.Cleanup(tr.CloseIdleConnections)
			st, err := objstore.Open(context.Background(), "s3://"+srv.Bucket(t)+"/tables", objstore.Options{
				Endpoint: srv.Endpoint(), Region: srv.Region(), PathStyle: true,
				AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(),
				HTTPClient: &http.Client{Transport: tr}, Backoff: 5 * time.Millisecond, MaxAttempts: 3,
			})
			if err != nil {
				t.Fatal(err)
			}
			return st, srv
		},
	}
}

// memStore is a file:// store on a strict in-memory filesystem of its own.
func memStore(t testing.TB) objstore.Store { return storeOn(t, vfs.NewStrictMem()) }

// storeOn is a file:// store on fs.
func storeOn(t testing.TB, fs vfs.FS) objstore.Store {
	st, err := objstore.Open(context.Background(), "file:///objects", objstore.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestFlushUploadsGenerations: every generation a commit names is in the
// store, byte for byte the local file; an open deletes the objects of
// attempts no commit names and leaves committed and foreign objects.
func TestFlushUploadsGenerations(t *testing.T) {
	for name, open := range objectStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store, _ := open(t)
			fs := vfs.NewStrictMem()
			opts := testOptions(fs, tableName(t, ""))
			opts.Store = store
			h := openHost(t, opts)
			s := mustOpen(t, h, "s0")
			for i := range 3 {
				if _, err := s.Append(ctx, rows("a", 10*i, 10), Source{}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			m := s.Manifest()
			if len(m.Flushed) != 3 {
				t.Fatalf("%d generations flushed, want 3", len(m.Flushed))
			}
			for _, g := range m.Flushed {
				checkObjectIsFile(t, store, fs, opts, g.File)
			}
			if err := h.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// A failed attempt's object and a foreign object beside them.
			stray := generation.ObjectKey(opts.Table, "s0", generation.Name(9, 1, "0badf00d"))
			foreign := generation.ObjectKey(opts.Table, "s0", "README")
			for _, k := range []string{stray, foreign} {
				if err := store.Create(ctx, k, strings.NewReader("x"), 1); err != nil {
					t.Fatal(err)
				}
			}
			h2 := openHost(t, opts)
			defer h2.Close(ctx)
			mustOpen(t, h2, "s0")
			if _, err := store.Stat(ctx, stray); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("the uncommitted attempt's object is still there: %v", err)
			}
			if _, err := store.Stat(ctx, foreign); err != nil {
				t.Errorf("a foreign object was deleted: %v", err)
			}
			for _, g := range m.Flushed {
				checkObjectIsFile(t, store, fs, opts, g.File)
			}
		})
	}
}

func checkObjectIsFile(t *testing.T, store objstore.Store, fs vfs.FS, opts Options, file string) {
	t.Helper()
	ctx := context.Background()
	obj, err := store.Open(ctx, generation.ObjectKey(opts.Table, "s0", file))
	if err != nil {
		t.Fatalf("generation %s is not in the store: %v", file, err)
	}
	defer obj.Close()
	got, err := io.ReadAll(io.NewSectionReader(obj, 0, obj.Size()))
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.Open(filepath.Join(opts.DataDir, opts.Table, "shards", "s0", "gen", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("object %s: %d bytes, the file %d, and they differ", file, len(got), len(want))
	}
}

// TestFlushWaitsForTheStore: while the S3 server is down a flush fails,
// naming the upload, and commits nothing; once it is back the next flush
// commits every row exactly once.
func TestFlushWaitsForTheStore(t *testing.T) {
	ctx := context.Background()
	store, srv := objectStores(t)["s3"](t)
	fs := vfs.NewStrictMem()
	opts := testOptions(fs, tableName(t, ""))
	opts.Store = store
	h := openHost(t, opts)
	defer h.Close(ctx)
	s := mustOpen(t, h, "s0")
	if _, err := s.Append(ctx, rows("a", 0, 20), Source{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Flush(ctx)
	if err == nil || !strings.Contains(err.Error(), "upload generation") || !strings.Contains(err.Error(), "create s3://") {
		t.Fatalf("flush with the store down: %v", err)
	}
	if len(s.Manifest().Flushed) != 0 {
		t.Fatal("a generation was committed without its object")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, rows("b", 0, 5), Source{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids, m := committed(t, fs, opts, "s0")
	if len(ids) != 25 {
		t.Fatalf("%d rows committed, want 25", len(ids))
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("row %s committed %d times", id, n)
		}
	}
	for _, g := range m.Flushed {
		checkObjectIsFile(t, store, fs, opts, g.File)
	}
}
