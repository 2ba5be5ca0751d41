// Package client sends rows to a rollwal writer over HTTP
// (POST /v1/shards/{shard}/rows, NDJSON). It depends on nothing of the
// writer, so producers import it without the engine, etcd or Parquet.
//
// # Appending
//
// Every row is a map with an "id" (a non-empty string, unique per table)
// and the table's columns:
//
//	c, err := client.New("http://127.0.0.1:8080", client.Options{})
//	res, err := c.Append(ctx, "default", []map[string]any{
//		{"id": "r1", "prompt": "2+2?", "completion": "4", "reward": 1.0},
//	}, nil)
//
// Append returns once the writer has made the rows durable (after its WAL
// fsync). Result.Stored counts rows newly stored and Result.Duplicates rows
// whose id the writer already held; both are acknowledged. Pass a *Source
// to tell the writer which upstream position the rows cover: after the
// rows' generation commits, the writer persists the highest offset per
// source, the resume point of a restarted producer.
//
// # Batching
//
// The writer pays one fsync per request, so one row per request wastes it:
// send hundreds to thousands of rows at a time. A Batcher does this for a
// stream of single rows. It keeps one open batch per shard and sends it
// when it holds BatcherOptions.MaxRows rows or MaxBytes bytes, or when its
// first row has waited Linger. Each Add returns the *Ack of the row's
// batch; wait on it before treating the row as stored. A shard's batches
// are sent one at a time and in order, so an acknowledged batch means every
// earlier batch of that shard was acknowledged too.
//
// # Retries
//
// The writer acknowledges a row whose id it already holds as a duplicate
// instead of storing it again, so resending a request whose answer was lost
// is safe: a retry stores nothing twice. That dedupe window is the writer's
// memtable: it lasts from the append until the generation holding the rows
// is flushed (by size, or after the writer's flush age, 30 s by default).
// The client therefore retries promptly and a bounded number of times: on
// network errors and cut connections, 429, 502, 503 and 504, up to
// Options.MaxRetries times, waiting an exponentially growing, jittered
// backoff between Options.MinBackoff and Options.MaxBackoff (jitter keeps
// many producers from retrying in lockstep). It never retries an answer
// that would be refused again:
//
//   - 400: a *BadRequestError with the writer's message and the index of
//     the bad row; nothing of the request was stored. Fix or drop the row.
//   - 409: ErrNotOwner: this writer does not own the shard (it was fenced,
//     or the outcome of the append is unknown). Find the shard's current
//     owner and send the same rows there; their ids keep that safe.
//   - 413: ErrTooLarge: split the batch.
//   - 404 and others: a *StatusError.
//
// # Backpressure
//
// A writer whose memory budget is exhausted answers 429 with Retry-After:
// the client waits at least that long (bounded by MaxBackoff) before the
// retry. Out of retries, the error matches ErrBackpressure. A Batcher
// passes backpressure on to the producer: once BatcherOptions.MaxPending
// batches of a shard wait to be sent, Add blocks until one is acknowledged
// or its context ends, so a slow writer slows its producers instead of
// filling their memory.
//
// After a batch of a shard fails for good, a Batcher refuses the shard's
// later rows with an error wrapping the failure, so no failed batch is
// silently skipped over by later ones (whose source offsets would pass
// it); start a new Batcher, e.g. against the shard's new owner, and resend
// from the last acknowledged position.
package client
