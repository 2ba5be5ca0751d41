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
// the writer already held (a retried batch of the session, or an id in its
// memtable); both are acknowledged. Pass a *Source
// to tell the writer which upstream position the rows cover: after the
// rows' generation commits, the writer persists the highest offset per
// source, the resume point of a restarted producer.
//
// Rows a producer has as NDJSON already (a JSON object a line) go as they
// are with AppendNDJSON, which encodes nothing and takes the same session,
// retries and results as Append.
//
// # TLS
//
// For a writer serving https (http.tls.cert_file), use an https:// base
// URL; Options.TLSConfig sets the CAs that sign the writer's certificate
// and, for a writer that requires client certificates
// (http.tls.client_ca_file), the producer's own:
//
//	cert, err := tls.LoadX509KeyPair("producer.pem", "producer.key")
//	c, err := client.New("https://writer:8080", client.Options{
//		TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
//	})
//
// A handshake that fails is a transport error: retried, then matching
// ErrOutcomeUnknown.
//
// # Batching
//
// The writer pays one fsync per request, so one row per request wastes it:
// send hundreds to thousands of rows at a time. A Batcher does this for a
// stream of single rows. It keeps one open batch per shard and sends it
// when it holds BatcherOptions.MaxRows rows or MaxBytes bytes, or when its
// first row has waited Linger. Each Add returns the *Ack of the row's
// batch; wait on it before treating the row as stored. A shard's batches
// are sent one at a time and in order, numbered on in the Client's session,
// so an acknowledged batch means every earlier batch of that shard was
// acknowledged too.
//
// # Producer sessions
//
// A Client is a producer session of the writer (its idempotent producer,
// after Kafka's): every batch carries the session's id and the sequence
// number of its first row (POST …/rows?producer=P&seq=N), and the session
// numbers its rows in each shard 0, 1, 2, … without gaps across batches.
// The writer keeps, per producer and shard, the next sequence it expects,
// in its WAL and with every committed generation, so that it knows it
// after a flush, a merge, a crash and replay, a restart or a failover:
//
//   - a batch at the expected sequence is stored;
//   - a batch wholly below it is a retry of an acknowledged one: it is
//     answered with every row a duplicate and nothing is stored — at any
//     later time, not only while the rows are in a memtable;
//   - anything else is refused with 409 naming the expected sequence, and
//     nothing is stored: a later batch never slips ahead of an earlier
//     one that failed.
//
// So with a session a retry is deduplicated whenever it comes. Without
// one (Options.NoSession, or any HTTP client that sends no producer) rows
// are deduplicated by id only while an earlier copy is still in the
// writer's memtable, until its generation is flushed.
//
// The id is Options.Producer, or by default one the Client makes up ("go-"
// and 16 random hex digits; Client.Producer returns it). Each id is a
// session the writer tracks per shard, up to a limit (10,000 by default)
// and until it has been idle for the writer's producer expiry (7 days by
// default): make one Client per process and share it, not one per request.
// Past the limit a new session is refused with ErrTooManyProducers.
//
// How the Client numbers a shard's batches:
//
//   - One batch of a shard is on its way at a time per Client: concurrent
//     Appends to one shard take turns (in the order they asked), each
//     waiting for the one before it to be answered; Appends to different
//     shards run in parallel. A Batcher shares the turns with Append, so
//     they may be mixed. To pipeline, use a Batcher: it builds the next
//     batches while one is on its way. Because nothing of a shard is sent
//     while an earlier batch is unanswered, the writer never sees a later
//     batch before an earlier one of the same session.
//   - A batch is retried (network errors, 429, 502, 503, 504) with the same
//     sequence number. Result.SessionSeq is the number it was stored (or
//     found) at.
//   - A batch the writer refused, storing nothing of it (400, 404, 413,
//     429 after the retries, 409 "not owner" with no earlier attempt that
//     might have been stored), gives its numbers back: the shard's next
//     batch takes them.
//   - A batch whose outcome stays unknown (ErrOutcomeUnknown: every retry
//     met a lost answer or a 5xx, or the context ended mid-request) keeps
//     its numbers. Appending the same rows (and source) again to the shard
//     next retries it at the same numbers: stored once. Appending anything
//     else makes the Client first send the unknown batch again at its
//     numbers, then the new one; while that fails, the new one is not sent
//     and its Append fails. An unknown outcome may thus end up stored:
//     never store it twice by appending its rows as a different batch.
//   - A 409 saying that the writer expects an earlier sequence (it forgot
//     the producer: its state expired) renumbers the batch to the expected
//     sequence and sends it again. A 409 that the session cannot account
//     for — the writer is ahead, because another process uses the same
//     Producer id — is a *SequenceError (errors.Is ErrSequence) carrying
//     the expected sequence; nothing of the batch was stored, and the
//     shard's next batch is numbered from the expected sequence. Never use
//     one id in two processes at once: a batch that lies wholly below what
//     the other stored is taken for a retry and answered as duplicates.
//
// With the default id, each Client starts every shard at 0. With a
// Producer id of the caller's, the Client asks the writer where the id left
// off in a shard (GET /v1/shards/{shard}/producers/{id}, once per shard,
// before the first batch; Client.NextSeq returns it) and numbers on from
// there. To resume exactly after a restart, a producer keeps its id, uses
// it in one process at a time, and appends each shard's rows as one
// deterministic stream: sequence k is always row k of the stream (e.g.
// row k of a partition). Then NextSeq = N says rows 0…N-1 are stored,
// whatever the outcome of the batches in flight at the crash, and the
// producer appends from row N. It needs to keep nothing else: the writer
// keeps the sequences.
//
// # Retries
//
// The client retries promptly and a bounded number of times: on network
// errors and cut connections, 408, 429, 502, 503 and 504, up to
// Options.MaxRetries times, waiting an exponentially growing, jittered
// backoff between Options.MinBackoff and Options.MaxBackoff (jitter keeps
// many producers from retrying in lockstep). A retry of a session's batch
// is deduplicated by its sequence; without a session, by the rows' ids
// while the first attempt is in the writer's memtable (from the append
// until its generation is flushed, by size or after the writer's flush
// age, 30 s by default). It never retries an answer that would be refused
// again:
//
//   - 400: a *BadRequestError with the writer's message and the index of
//     the bad row (or the refused query parameter); nothing of the request
//     was stored. Fix or drop the row.
//   - 409: ErrNotOwner: this writer does not own the shard (it was fenced,
//     or the outcome of the append is unknown). Find the shard's current
//     owner and send the rows there: with the same Producer id, NextSeq at
//     the new owner says how much of the shard's stream is stored (append
//     from there); in a new session, the rows' ids deduplicate them while
//     the copy the new owner replayed is in its memtable. 409 with code
//     "sequence": see Producer sessions.
//   - 413: ErrTooLarge: split the batch.
//   - 429 "too_many_producers": ErrTooManyProducers.
//   - 401 and 403: ErrUnauthorized: set Options.Token to the writer's
//     ingest token.
//   - 404 and others: a *StatusError.
//
// Errors after which the rows may or may not be stored match
// ErrOutcomeUnknown.
//
// Every error also matches the category of package errs that the
// writer's answer carries (errors.Is(err, errs.Backpressure),
// errs.NotOwner, errs.TooLarge, …; StatusError.Category), and the retry
// decision is the category's (errs.Category.Retry): the writer and the
// Client share one table (docs/errors.md).
//
// # Backpressure
//
// A writer whose memory budget is exhausted, or that holds as many request
// bodies in flight as it may ("inflight_limit"), answers 429 with Retry-After:
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
// from the last acknowledged position — except, on the same Client, the
// rows of a batch whose Ack matches ErrOutcomeUnknown: the Client sends
// that batch again itself before the shard's next one (see Producer
// sessions). The Acks of the batches dropped after it do not match
// ErrOutcomeUnknown: they were never sent.
package client
