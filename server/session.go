package server

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/errs"
)

// Producer sessions over HTTP. An append names its session with the query
// parameters producer (the session id) and seq (the sequence number of the
// request's first row), both or neither:
//
//	POST /v1/shards/{shard}/rows?producer=P&seq=N
//
// or the same under /v1/tables/{table}: a session is one shard's, of one
// table. The engine judges the sequence (engine.Producer): at the
// producer's next expected sequence the rows are stored; a retry of an
// acknowledged request answers 200 with every row a duplicate; anything
// else is a 409 with code "sequence" naming the expected sequence. A
// producer that kept its id reads where to resume from
//
//	GET /v1/shards/{shard}/producers/{P}  →  {"producer": P, "next_seq": N, "known": bool}

// ProducerResponse answers GET /v1/shards/{shard}/producers/{producer}.
// Known is false when the shard holds no state for the producer (never
// seen, or expired): it then expects seq 0.
type ProducerResponse struct {
	Producer string `json:"producer"`
	NextSeq  uint64 `json:"next_seq"`
	Known    bool   `json:"known"`
}

// MaxSourceOffset is the largest source offset an append may carry
// (engine.MaxSourceOffset, which says why).
const MaxSourceOffset = engine.MaxSourceOffset

// appendOptionsOf reads the optional source/offset and producer/seq query
// parameters, or the 400 that refuses them.
func appendOptionsOf(r *http.Request) (engine.AppendOptions, *apiError) {
	q := r.URL.Query()
	for _, name := range []string{"source", "offset", "producer", "seq"} {
		if len(q[name]) > 1 {
			return engine.AppendOptions{}, badParameter(name, "query parameter %s is given %d times; give it once", name, len(q[name]))
		}
	}
	src, perr := sourceOf(q)
	if perr != nil {
		return engine.AppendOptions{}, perr
	}
	p, perr := producerOf(q)
	if perr != nil {
		return engine.AppendOptions{}, perr
	}
	return engine.AppendOptions{Source: src, Producer: p}, nil
}

// sourceOf reads the optional source and offset query parameters.
func sourceOf(q url.Values) (engine.Source, *apiError) {
	name, off := q.Get("source"), q.Get("offset")
	switch {
	case name == "" && off == "":
		return engine.Source{}, nil
	case name == "":
		return engine.Source{}, badParameter("source", "query parameter offset needs source")
	case off == "":
		return engine.Source{}, badParameter("offset", "query parameter source needs offset")
	}
	n, err := strconv.ParseInt(off, 10, 64)
	if err != nil || n < 0 || n > MaxSourceOffset {
		return engine.Source{}, badParameter("offset", "query parameter offset %q: not a decimal integer from 0 to 2^62-1", off)
	}
	src := engine.Source{Name: name, Offset: n}
	if err := engine.ValidateSource(src); err != nil {
		return engine.Source{}, badParameter("source", "query parameter source: %v", err)
	}
	return src, nil
}

// producerOf reads the optional producer and seq query parameters.
func producerOf(q url.Values) (engine.Producer, *apiError) {
	hasP, hasSeq := q.Has("producer"), q.Has("seq")
	switch {
	case !hasP && !hasSeq:
		return engine.Producer{}, nil
	case !hasP:
		return engine.Producer{}, badParameter("producer", "query parameter seq needs producer")
	case !hasSeq:
		return engine.Producer{}, badParameter("seq", "query parameter producer needs seq")
	}
	id, seq := q.Get("producer"), q.Get("seq")
	if err := engine.ValidateProducerID(id); err != nil {
		return engine.Producer{}, badParameter("producer", "query parameter producer: %v", err)
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return engine.Producer{}, badParameter("seq", "query parameter seq %q: not a decimal uint64", seq)
	}
	return engine.Producer{ID: id, Seq: n}, nil
}

// checkSeqRange refuses a session request whose rows would number past
// the largest uint64.
func checkSeqRange(p engine.Producer, rows int) *apiError {
	if p.ID != "" && p.Seq > math.MaxUint64-uint64(rows) {
		return badParameter("seq", "query parameter seq %d: %d rows from there overflow a uint64", p.Seq, rows)
	}
	return nil
}

func badParameter(name, format string, args ...any) *apiError {
	return &apiError{Error: fmt.Sprintf(format, args...), Code: codeBadParameter, Parameter: name}
}

// sequenceAnswer is the 409 body of a batch refused for its sequence.
func sequenceAnswer(e *engine.SequenceError) apiError {
	seq, count, expected, unknown := e.Seq, e.Count, e.Expected, e.Unknown
	return apiError{
		Error: e.Error(), Code: codeSequence,
		Producer: e.Producer, Seq: &seq, Count: &count, ExpectedSeq: &expected, UnknownProducer: &unknown,
	}
}

// handleProducer answers where a producer resumes in a shard. It answers
// only while the shard takes writes here: a stopped (fenced) shard's state
// may be behind its new owner's, and a producer resuming from it would
// have its new rows taken for retries.
func (s *Server) handleProducer(w http.ResponseWriter, r *http.Request, t *table) {
	sh, ok := s.shard(w, r, t)
	if !ok || s.notReady(w, r) {
		return
	}
	id := r.PathValue("producer")
	if err := engine.ValidateProducerID(id); err != nil {
		s.failAs(w, r, errs.InvalidInput, apiError{Error: "producer in the path: " + err.Error(), Code: codeBadParameter, Parameter: "producer"})
		return
	}
	if why := s.stopped(sh); why != "" {
		s.failAs(w, r, errs.Closed, apiError{Error: fmt.Sprintf("shard %s is stopped: %s", t.shardName(sh.Name()), why), Code: codeStopped})
		return
	}
	next, known := sh.ProducerNextSeq(id)
	writeJSON(w, http.StatusOK, ProducerResponse{Producer: id, NextSeq: next, Known: known})
}
