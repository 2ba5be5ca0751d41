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

// readGeneration reads planned generation pg of shard with the schema in
// its footer, converted to the pass's schema ps, and returns where it was
// read from (a path or an object URL) for errors.
func (c *Coordinator) readGeneration(ctx context.Context, ps passSchema, shard string, pg PlannedGeneration) (generation.Meta, generation.Data, string, error) {
	v := generationVersion(pg.Generation)
	if c.opts.Store == nil {
		m, d, err := ps.readInto(c, pg.Path, v)
		return m, d, pg.Path, err
	}
	key := layout.GenerationKey(c.opts.Table, shard, pg.File)
	url := objectURL(c.opts.Store, key)
	m, d, err := ps.convertRead(url, v, func() (generation.Meta, generation.Data, error) {
		return readStoredObject(ctx, c.opts.Store, key, url)
	})
	return m, d, url, err
}

// readStoredObject reads the generation object key of store (url in errors).
func readStoredObject(ctx context.Context, store objstore.Store, key, url string) (generation.Meta, generation.Data, error) {
	obj, err := store.Open(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return generation.Meta{}, generation.Data{}, fmt.Errorf(
			"generation missing from the store (the manifest names it: flushed without a store, or deleted before the merge?): %w", err)
	}
	if err != nil {
		return generation.Meta{}, generation.Data{}, err
	}
	defer obj.Close()
	b, err := fetchObject(obj)
	if err != nil {
		return generation.Meta{}, generation.Data{}, err
	}
	return generation.ReadStoredFrom(bytes.NewReader(b), int64(len(b)), url)
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
