package snapshot

import (
	"context"
	"errors"
	"fmt"

	"github.com/gocql/gocql"
)

// statements are the CQL of one table. Every write binds the same values
// in the same order (see writeArgs); the conditional ones append the
// condition's value.
type statements struct {
	advance  string // gated update: lands iff offset <= mine
	claim    string // claim of an absent or guard-expired row: lands iff offset is null
	plain    string // legacy last-write-wins update
	get      string
	delete   string // LWT delete
	plainDel string // legacy delete
}

func newStatements(ks, table string) statements {
	t := ks + "." + table
	const set = `SET "offset" = ?, value = ?, metadata = ?`
	const where = `WHERE table_name = ? AND shard = ? AND source = ?`
	update := `UPDATE ` + t + ` USING TTL ? ` + set + ` ` + where
	return statements{
		advance:  update + ` IF "offset" <= ?`,
		claim:    update + ` IF "offset" = null`,
		plain:    update,
		get:      `SELECT "offset", value, metadata FROM ` + t + ` ` + where,
		delete:   `DELETE FROM ` + t + ` ` + where + ` IF EXISTS`,
		plainDel: `DELETE FROM ` + t + ` ` + where,
	}
}

// writeArgs binds an update: TTL, the three cells, the key. An empty value
// or metadata is written as an empty (not null) cell, so that all three
// cells always exist and expire together.
func (c *Cassandra) writeArgs(key Key, s Snapshot) []any {
	value := s.Value
	if value == nil {
		value = []byte{}
	}
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return []any{c.ttl, s.Offset, value, md, key.Table, key.Shard, key.Source}
}

// Get reads the snapshot at the configured consistency. A row whose offset
// cell is null (it outlived its TTL while the row marker did not) reads as
// absent.
func (c *Cassandra) Get(ctx context.Context, key Key) (Snapshot, error) {
	if err := checkArgs(ctx, key, nil); err != nil {
		return Snapshot{}, err
	}
	q := c.session.Query(c.stmt.get, key.Table, key.Shard, key.Source).WithContext(ctx).
		Consistency(c.opts.Consistency).RetryPolicy(neverRetry{})
	var (
		off   *int64
		value []byte
		md    map[string]string
	)
	err := q.Scan(&off, &value, &md)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return Snapshot{}, fmt.Errorf("%w: key %s", ErrNotFound, key)
	case err != nil:
		return Snapshot{}, fmt.Errorf("snapshot: cassandra: get key %s: %w", key, err)
	case off == nil:
		return Snapshot{}, fmt.Errorf("%w: key %s (row present, offset expired)", ErrNotFound, key)
	case *off < 0:
		return Snapshot{}, fmt.Errorf("%w: cassandra key %s: offset %d", ErrCorrupt, key, *off)
	}
	return Snapshot{Offset: *off, Value: value, Metadata: md}.normalize(), nil
}

// Persist stores s unless the stored offset is above s.Offset:
//
//	round (at most casRounds):
//	  advance: UPDATE … IF offset <= s.Offset
//	    applied                     → done
//	    not applied, offset = S     → *ConflictError{Stored: S}
//	    not applied, no/null offset → the row is absent or guard-expired:
//	  claim:   UPDATE … IF offset = null
//	    applied                     → done
//	    not applied, offset = S > s → *ConflictError{Stored: S}
//	    not applied, offset = S <= s: a lower claimer won → next round
//	after the last round            → *ConflictError{Stored: -1}
//
// In legacy mode it is one plain UPDATE.
func (c *Cassandra) Persist(ctx context.Context, key Key, s Snapshot) error {
	if err := checkArgs(ctx, key, &s); err != nil {
		return err
	}
	if c.opts.LegacyLastWriteWins {
		return c.plainWrite(ctx, "persist", key, s.Offset, c.stmt.plain, c.writeArgs(key, s)...)
	}
	args := c.writeArgs(key, s)
	advanceArgs := append(args[:len(args):len(args)], s.Offset)
	for round := range casRounds {
		c.hook("advance", round)
		r, err := c.lwt(ctx, "persist (advance)", key, s.Offset, c.stmt.advance, advanceArgs...)
		if err != nil {
			return err
		}
		switch r.outcome(s.Offset) {
		case casApplied:
			return nil
		case casBehind:
			return &ConflictError{Key: key, Stored: *r.offset, Attempted: s.Offset}
		case casAhead:
			return r.impossible(key, s.Offset, "advance")
		}
		c.hook("claim", round)
		r, err = c.lwt(ctx, "persist (claim)", key, s.Offset, c.stmt.claim, args...)
		if err != nil {
			return err
		}
		switch r.outcome(s.Offset) {
		case casApplied:
			return nil
		case casBehind:
			return &ConflictError{Key: key, Stored: *r.offset, Attempted: s.Offset}
		}
		// casAhead: a concurrent claimer with a lower (or equal) offset got
		// there first; the gated update orders us after it. casAbsent: the
		// row vanished again (a delete); claim again.
	}
	return &ConflictError{Key: key, Stored: -1, Attempted: s.Offset}
}

// hook calls the test hook, if any, before a step of Persist.
func (c *Cassandra) hook(step string, round int) {
	if c.beforeStep != nil {
		c.beforeStep(step, round)
	}
}

// Delete removes the row with an LWT (DELETE … IF EXISTS), so that it is
// ordered with the persists by Paxos ballots, not by client clocks. It is
// not fenced by offset. In legacy mode it is a plain DELETE.
func (c *Cassandra) Delete(ctx context.Context, key Key) error {
	if err := checkArgs(ctx, key, nil); err != nil {
		return err
	}
	args := []any{key.Table, key.Shard, key.Source}
	if c.opts.LegacyLastWriteWins {
		return c.plainWrite(ctx, "delete", key, -1, c.stmt.plainDel, args...)
	}
	_, err := c.lwt(ctx, "delete", key, -1, c.stmt.delete, args...)
	return err // applied or not (absent), the row is gone
}

// casOutcome classifies one LWT result against the offset we wrote.
type casOutcome int

const (
	casApplied casOutcome = iota
	// casAbsent: not applied, and the row is absent (no offset column in the
	// result) or present with a null offset (the guard expired).
	casAbsent
	// casBehind: not applied, stored offset above ours.
	casBehind
	// casAhead: not applied, stored offset at or below ours.
	casAhead
)

// casRow is one LWT result row. An LWT answers "[applied]" alone when it
// applied, and when it did not, "[applied]" plus the condition's columns as
// stored — or "[applied]" alone again when the row does not exist. So the
// columns of the result, not just their values, carry meaning: a missing
// offset column means absent; a present but null one means "row present,
// offset expired". Scanning offset into a **int64 keeps null apart from 0,
// which gocql's MapScanCAS (null bigint → 0) and ScanCAS (no scan of a
// one-column result) do not.
type casRow struct {
	applied    bool
	hasApplied bool
	hasOffset  bool
	offset     *int64
}

// dest returns scan destinations for cols: [applied] and offset are kept,
// every other column (an IF EXISTS delete returns the whole row) skipped.
func (r *casRow) dest(cols []gocql.ColumnInfo) []any {
	d := make([]any, len(cols))
	for i, col := range cols {
		switch col.Name {
		case "[applied]":
			d[i], r.hasApplied = &r.applied, true
		case "offset":
			d[i], r.hasOffset = &r.offset, true
		}
	}
	return d
}

func (r *casRow) outcome(mine int64) casOutcome {
	switch {
	case r.applied:
		return casApplied
	case !r.hasOffset || r.offset == nil:
		return casAbsent
	case *r.offset > mine:
		return casBehind
	}
	return casAhead
}

// impossible reports an advance refused although the offset it reports
// passes the condition: Cassandra below the LWT floor, or an unsafe
// serial-read setting. Nothing was written.
func (r *casRow) impossible(key Key, mine int64, stmt string) error {
	return fmt.Errorf("snapshot: cassandra: persist key %s: the %s at offset %d was refused with stored offset %d, which passes its condition: LWTs are not linearizable on this cluster (version floor, cassandra.unsafe.disable-serial-reads-linearizability?)",
		key, stmt, mine, *r.offset)
}

// lwt runs one conditional statement with no driver retries and the result
// metadata always sent (an LWT's result columns depend on the outcome, so a
// prepared statement's cached metadata would misdescribe them).
func (c *Cassandra) lwt(ctx context.Context, op string, key Key, off int64, stmt string, args ...any) (casRow, error) {
	var r casRow
	if err := context.Cause(ctx); err != nil {
		return r, fmt.Errorf("snapshot: cassandra: %s key %s: not sent: %w", op, key, err)
	}
	q := c.session.Query(stmt, args...).WithContext(ctx).
		Consistency(c.opts.Consistency).SerialConsistency(c.opts.SerialConsistency).
		RetryPolicy(neverRetry{}).Idempotent(false).NoSkipMetadata()
	defer q.Release()
	iter := q.Iter()
	scanned := iter.Scan(r.dest(iter.Columns())...)
	if err := iter.Close(); err != nil {
		return r, c.writeErr(op, key, off, err)
	}
	if !scanned || !r.hasApplied {
		return r, c.writeErr(op, key, off, fmt.Errorf("LWT result without a row or an [applied] column (columns %v)", iter.Columns()))
	}
	return r, nil
}

func (c *Cassandra) plainWrite(ctx context.Context, op string, key Key, off int64, stmt string, args ...any) error {
	q := c.session.Query(stmt, args...).WithContext(ctx).Consistency(c.opts.Consistency).RetryPolicy(neverRetry{})
	defer q.Release()
	if err := q.Exec(); err != nil {
		return c.writeErr(op, key, off, err)
	}
	return nil
}

// writeErr classifies a failed write: refused before it could run (nothing
// written), or unknown. Unknown is the default, because it is never wrong:
// a write timeout of type CAS may or may not have been accepted, one of type
// SIMPLE was decided but may not be visible yet, an Unavailable in the
// commit phase follows an accepted proposal, and a client timeout or
// deadline says nothing at all. A later Paxos round completes an accepted
// proposal, so the retry the caller makes settles it.
func (c *Cassandra) writeErr(op string, key Key, off int64, err error) error {
	at := ""
	if off >= 0 {
		at = fmt.Sprintf(" at offset %d", off)
	}
	if refusedBeforeRun(err) {
		return fmt.Errorf("snapshot: cassandra: %s key %s%s: refused (not applied): %w", op, key, at, err)
	}
	return fmt.Errorf("%w: cassandra: %s key %s%s: %w", ErrUnknownOutcome, op, key, at, err)
}

// refusedBeforeRun reports errors that prove the statement never ran: no
// connection to send it on, or a refusal at parse, validation or
// authorization time.
func refusedBeforeRun(err error) bool {
	if errors.Is(err, gocql.ErrNoConnections) {
		return true
	}
	var re gocql.RequestError
	if errors.As(err, &re) {
		switch re.Code() {
		case gocql.ErrCodeSyntax, gocql.ErrCodeInvalid, gocql.ErrCodeUnauthorized, gocql.ErrCodeConfig,
			gocql.ErrCodeCredentials, gocql.ErrCodeProtocol, gocql.ErrCodeAlreadyExists:
			return true
		}
	}
	return false
}
