package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/objstore"
)

// Where Stage reads a shard's generations: the local file under the data
// directory (pg.Path), or, with Options.Store, the object
// layout.GenerationKey(table, shard, file) that the shard's writer uploaded
// before it committed the generation to its manifest. Either way the
// generation goes through the same checks (generation.ReadStored and
// ReadStoredFrom share one code path), and a read error of the store is an
// I/O error naming the operation and the object, not ErrCorrupt.

// source is a planned generation opened for Stage: the copy path and the
// decode path read the same open file or fetched object, so a generation
// the copy declines is not opened, or fetched from the store, twice. An
// error opening it is kept for the decode path to report, after its
// schema version check, as it always has.
type source struct {
	r     io.ReaderAt
	size  int64
	name  string // a path or an object URL, for errors
	close func()
	err   error
}

// openSource opens planned generation pg of shard: the local file, or the
// store's object read whole (its ranged reads would be a GET each).
func (c *Coordinator) openSource(ctx context.Context, shard string, pg PlannedGeneration) *source {
	if c.opts.Store == nil {
		src := &source{name: pg.Path, close: func() {}}
		f, err := c.opts.FS.Open(pg.Path)
		if err != nil {
			src.err = fmt.Errorf("generation: open %s: %w", pg.Path, err)
			return src
		}
		src.close = func() { _ = f.Close() }
		st, err := f.Stat()
		if err != nil {
			src.err = fmt.Errorf("generation: stat %s: %w", pg.Path, err)
			return src
		}
		src.r, src.size = f, st.Size()
		return src
	}
	key := layout.GenerationKey(c.opts.Table, shard, pg.File)
	src := &source{name: objectURL(c.opts.Store, key), close: func() {}}
	b, err := fetchGeneration(ctx, c.opts.Store, key)
	if err != nil {
		src.err = err
		return src
	}
	src.r, src.size = bytes.NewReader(b), int64(len(b))
	return src
}

// read reads the generation with the schema in its footer.
func (s *source) read() (generation.Meta, generation.Data, error) {
	if s.err != nil {
		return generation.Meta{}, generation.Data{}, s.err
	}
	return generation.ReadStoredFrom(s.r, s.size, s.name)
}

// fetchGeneration fetches generation object key of store whole.
func fetchGeneration(ctx context.Context, store objstore.Store, key string) ([]byte, error) {
	obj, err := store.Open(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf(
			"generation missing from the store (the manifest names it: flushed without a store, or deleted before the merge?): %w", err)
	}
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return fetchObject(obj)
}

// fetchChunk is the size of the ranged reads that fetch a generation
// object: Stage decodes the whole generation anyway, and parquet-go's own
// reads of about 32 KiB would be a GET each (some 2,000 for a 64 MiB
// generation, one after another).
const fetchChunk = 8 << 20

// fetchObject reads the whole object, fetchChunk bytes a request. An
// object shorter than its Size (it cannot change under an open S3 object,
// whose reads are conditional on its ETag) is returned short, and the
// generation's checks refuse it as truncated; a read error is returned as
// it is (it names the operation and the object).
func fetchObject(obj objstore.Object) ([]byte, error) {
	b := make([]byte, obj.Size())
	for off := int64(0); off < int64(len(b)); {
		n, err := obj.ReadAt(b[off:min(off+fetchChunk, int64(len(b)))], off)
		off += int64(n)
		if err == io.EOF {
			return b[:off], nil
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// objectURL is the URL of an object of store: the store's URL and the key.
func objectURL(store objstore.Store, key string) string {
	u := store.String()
	if len(u) > 0 && u[len(u)-1] == '/' {
		return u + key
	}
	return u + "/" + key
}
