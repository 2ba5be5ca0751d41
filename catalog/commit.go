package catalog

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go/table"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/internal/etcderr"
)

// PreparedCommit is a table commit whose new metadata file is written and
// whose catalog swap is still to be done: the compare and the put below.
// A caller may apply them with Apply, or put them into its own etcd
// transaction next to its own compares and ops, so that the table and the
// caller's keys change together or not at all:
//
//	txn  If   ModRevision(<table key>) == Revision, <caller's compares>
//	     Then Put(<table key>, record{Location, previous}), <caller's ops>
//
// When that transaction's outcome is unknown, ReadBack decides it.
type PreparedCommit struct {
	Ident table.Identifier
	// Key is the table's etcd key, Revision its mod revision that the
	// commit was prepared against.
	Key      string
	Revision int64
	// Location is the new metadata file (already durable), Previous the
	// one it replaces.
	Location, Previous string
	Metadata           table.Metadata
	Cmps               []clientv3.Cmp
	Ops                []clientv3.Op

	value []byte
	cat   *Etcd
}

// Table is the table as it is once the commit applied.
func (p *PreparedCommit) Table() *table.Table {
	return table.New(slices.Clone(p.Ident), p.Metadata, p.Location, p.cat.fsF, p.cat)
}

// PrepareCommit reads the table's current record and metadata, checks the
// requirements against it, applies the updates, and writes the result as
// a new metadata file. A failed requirement is ErrConflict. Nothing in
// etcd changes.
func (c *Etcd) PrepareCommit(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (*PreparedCommit, error) {
	cur, err := c.load(ctx, ident)
	if err != nil {
		return nil, err
	}
	return c.prepare(cur, reqs, updates, nil)
}

func (c *Etcd) prepare(cur *current, reqs []table.Requirement, updates []table.Update, sidecar sidecarFunc) (*PreparedCommit, error) {
	for _, r := range reqs {
		if err := r.Validate(cur.tbl.Metadata()); err != nil {
			return nil, conflict(fmt.Sprintf("table %s: %v", cur.name, err))
		}
	}
	next, err := table.UpdateTableMetadata(cur.tbl.Metadata(), updates, cur.rec.MetadataLocation)
	if err != nil {
		return nil, fmt.Errorf("catalog: table %s: %w", cur.name, err)
	}
	v, err := parseMetadataVersion(cur.rec.MetadataLocation)
	if err != nil {
		return nil, err
	}
	loc := metadataLocation(next.Location(), v+1)
	if err := c.writeMetadata(next, loc, sidecar); err != nil {
		return nil, err
	}
	value := record{Format: recordFormat, MetadataLocation: loc, PreviousMetadataLocation: cur.rec.MetadataLocation}.encode()
	return &PreparedCommit{
		Ident: cur.tbl.Identifier(), Key: cur.key, Revision: cur.rev,
		Location: loc, Previous: cur.rec.MetadataLocation, Metadata: next,
		Cmps:  []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(cur.key), "=", cur.rev)},
		Ops:   []clientv3.Op{clientv3.OpPut(cur.key, string(value))},
		value: value, cat: c,
	}, nil
}

// Apply runs the prepared commit as a transaction of its own. A false
// guard is ErrConflict. An ambiguous failure is decided by ReadBack:
// committed (the table is returned), ErrNotApplied, ErrConflict
// (superseded), or ErrUnknownOutcome when the read-back fails too.
func (c *Etcd) Apply(ctx context.Context, p *PreparedCommit) (*table.Table, error) {
	ok, err := c.send(ctx, p)
	switch {
	case err == nil && ok:
		c.log.Info("table committed", "table", p.Ident, "metadata", p.Location)
		return p.Table(), nil
	case err == nil:
		return nil, conflict(fmt.Sprintf("table %v: the catalog key moved since revision %d", p.Ident, p.Revision))
	case etcderr.Definitive(err):
		return nil, err
	}
	out, rerr := c.ReadBack(context.WithoutCancel(ctx), p)
	switch {
	case rerr != nil:
		return nil, fmt.Errorf("%w: table %v: commit failed (%w) and reading back failed (%w)", ErrUnknownOutcome, p.Ident, err, rerr)
	case out == Committed:
		return p.Table(), nil
	case out == NotApplied:
		return nil, fmt.Errorf("%w: table %v: the key is still at revision %d: %w", ErrNotApplied, p.Ident, p.Revision, err)
	}
	return nil, conflict(fmt.Sprintf("table %v: superseded by another commit after %v", p.Ident, err))
}

func (c *Etcd) send(ctx context.Context, p *PreparedCommit) (bool, error) {
	if err := c.hook("before", nil); err != nil {
		return false, err
	}
	rctx, cancel := c.rpc(ctx)
	defer cancel()
	resp, err := c.cli.Txn(rctx).If(p.Cmps...).Then(p.Ops...).Commit()
	if err = c.hook("after", err); err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

func (c *Etcd) hook(phase string, err error) error {
	if c.afterTxn == nil {
		return err
	}
	return c.afterTxn(phase, err)
}

// Outcome is what ReadBack found.
type Outcome int

const (
	// NotApplied: the key still holds the prepared revision. The ops have
	// not applied (yet); applying the same ops again is safe.
	NotApplied Outcome = iota + 1
	// Committed: the key names the prepared metadata, or a later metadata
	// file whose metadata log names it.
	Committed
	// Superseded: the key moved to metadata that does not descend from the
	// prepared one (or the table was dropped); the ops can never apply.
	Superseded
)

func (o Outcome) String() string {
	return map[Outcome]string{NotApplied: "not applied", Committed: "committed", Superseded: "superseded"}[o]
}

// ReadBack decides a prepared commit's outcome from the table's key: the
// whole transaction that carried its ops applied if and only if the result
// is Committed.
func (c *Etcd) ReadBack(ctx context.Context, p *PreparedCommit) (Outcome, error) {
	resp, err := c.get(ctx, p.Key)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return Superseded, nil
	}
	kv := resp.Kvs[0]
	switch {
	case bytes.Equal(kv.Value, p.value):
		return Committed, nil
	case kv.ModRevision == p.Revision:
		return NotApplied, nil
	}
	return c.descends(ctx, p, kv.Value)
}

// descends reports Committed when the key's current metadata lists the
// prepared location as an earlier file.
func (c *Etcd) descends(ctx context.Context, p *PreparedCommit, value []byte) (Outcome, error) {
	rec, err := decodeRecord(p.Key, value)
	if err != nil {
		return 0, err
	}
	if rec.PreviousMetadataLocation == p.Location {
		return Committed, nil
	}
	tbl, err := table.NewFromLocation(ctx, p.Ident, rec.MetadataLocation, c.fsF, c)
	if err != nil {
		return 0, fmt.Errorf("catalog: read back %s: %w", rec.MetadataLocation, err)
	}
	for e := range tbl.Metadata().PreviousFiles() {
		if e.MetadataFile == p.Location {
			return Committed, nil
		}
	}
	return Superseded, nil
}

// CommitTable is the Catalog interface's commit: prepare against the
// current record, then Apply. A stale requirement or a moved key is
// ErrConflict (which matches table.ErrCommitFailed).
func (c *Etcd) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	cur, err := c.load(ctx, ident)
	if err != nil {
		return nil, "", err
	}
	if len(updates) == 0 {
		return cur.tbl.Metadata(), cur.rec.MetadataLocation, nil
	}
	p, err := c.prepare(cur, reqs, updates, nil)
	if err != nil {
		return nil, "", err
	}
	tbl, err := c.Apply(ctx, p)
	if err != nil {
		return nil, "", err
	}
	return tbl.Metadata(), tbl.MetadataLocation(), nil
}
