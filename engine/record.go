package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rollwal/rollwal/schema"
	"github.com/rollwal/rollwal/shardmeta"
	"github.com/rollwal/rollwal/wal"
)

// WAL payload kinds (wal.Header.Kind): wire format, see docs/format/wal.md.
//
//	kind 0  batch                       (format version 1 records)
//	kind 1  meta batch
//	meta := producer source uvarint(unix milliseconds)
//	producer := uvarint(len) bytes [uvarint(seq) uvarint(count)]   fields only when len > 0
//	source   := uvarint(len) bytes [varint(offset)]                offset only when len > 0
//
//	kind 2  versioned meta batch        uvarint(schema version ≥ 2) meta batch
//
// A kind 1 or 2 record may hold no rows (every row was a duplicate): it
// then covers one WAL position, which no row takes, and only carries its
// meta. Kinds 0 and 1 hold rows of schema version 1; a record of a later
// version is kind 2, so that a WAL written before versions reads as it
// did and a replay decodes each record with the columns it was written
// with.
const (
	kindBatch          uint8 = 0
	kindMetaBatch      uint8 = 1
	kindVersionedBatch uint8 = 2
)

// SchemaLookup returns version v of the table's schema.
type SchemaLookup func(v int) (*schema.Schema, error)

// RecordMeta is what a WAL record carries besides its rows.
type RecordMeta struct {
	Producer Producer
	// Count is the producer batch's row count (duplicates included): the
	// record moves the producer's next expected sequence to Seq+Count.
	Count  uint64
	Source Source
	Millis int64
	// SchemaVersion is the version of the table's schema the rows are
	// in; 0 and 1 both mean version 1.
	SchemaVersion int
}

func (m RecordMeta) empty() bool { return m.Producer.ID == "" && m.Source.Name == "" }

// appendMeta appends m's encoding to dst.
func appendMeta(dst []byte, m RecordMeta) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m.Producer.ID)))
	if m.Producer.ID != "" {
		dst = append(dst, m.Producer.ID...)
		dst = binary.AppendUvarint(dst, m.Producer.Seq)
		dst = binary.AppendUvarint(dst, m.Count)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Source.Name)))
	if m.Source.Name != "" {
		dst = append(dst, m.Source.Name...)
		dst = binary.AppendVarint(dst, m.Source.Offset)
	}
	return binary.AppendVarint(dst, m.Millis)
}

var errBadMeta = errors.New("engine: bad record meta")

// DecodeRecord decodes the payload of a WAL record the engine wrote (for
// tools that read a shard's WAL: verify, dump): its meta and its rows, in
// the schema version they were written with, checked against the
// positions the header covers.
func DecodeRecord(schemas SchemaLookup, h wal.Header, payload []byte) (RecordMeta, *schema.Batch, error) {
	m, b, err := decodeRecord(schemas, h.Kind, payload, false)
	if err != nil {
		return m, nil, err
	}
	if want := int(h.Count); b.Len() != want && !(h.Kind != kindBatch && b.Len() == 0 && want == 1) {
		return m, nil, fmt.Errorf("%d rows, the header covers %d positions", b.Len(), want)
	}
	return m, b, nil
}

// decodeRecord splits a WAL payload of the given kind into its meta and
// its batch; with borrow the batch's strings point into payload (see
// schema.DecodeBorrowed).
func decodeRecord(schemas SchemaLookup, kind uint8, payload []byte, borrow bool) (RecordMeta, *schema.Batch, error) {
	var m RecordMeta
	version := 1
	switch kind {
	case kindBatch:
	case kindVersionedBatch:
		v, n := binary.Uvarint(payload)
		if n <= 0 || v < 2 || v > uint64(maxSchemaVersion) {
			return m, nil, fmt.Errorf("%w: bad schema version", errBadMeta)
		}
		version, payload = int(v), payload[n:]
		m.SchemaVersion = version
		fallthrough
	case kindMetaBatch:
		var err error
		if m, payload, err = decodeMeta(payload); err != nil {
			return m, nil, err
		}
		m.SchemaVersion = version
	default:
		return m, nil, fmt.Errorf("%w: unknown record kind %d", errBadMeta, kind)
	}
	sch, err := schemas(version)
	if err != nil {
		return m, nil, err
	}
	decode := sch.Decode
	if borrow {
		decode = sch.DecodeBorrowed
	}
	b, err := decode(payload)
	return m, b, err
}

const maxSchemaVersion = shardmeta.MaxSchemaVersions

// appendVersioned appends the record prefix of a batch of schema version
// v: its kind, and the version where the kind carries one.
func appendVersioned(dst []byte, v int) ([]byte, uint8) {
	if v <= 1 {
		return dst, kindMetaBatch
	}
	return binary.AppendUvarint(dst, uint64(v)), kindVersionedBatch
}

func decodeMeta(b []byte) (RecordMeta, []byte, error) {
	var m RecordMeta
	r := metaReader{b: b}
	if id := r.str(MaxProducerIDBytes); id != "" {
		m.Producer = Producer{ID: id, Seq: r.uvarint()}
		m.Count = r.uvarint()
	}
	if name := r.str(MaxSourceBytes); name != "" {
		m.Source = Source{Name: name, Offset: r.varint()}
	}
	m.Millis = r.varint()
	return m, r.b, r.err
}

// metaReader reads varints and strings, keeping the first error.
type metaReader struct {
	b   []byte
	err error
}

func (r *metaReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *metaReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *metaReader) str(limit int) string {
	n := r.uvarint()
	if r.err != nil || n > uint64(limit) || n > uint64(len(r.b)) {
		r.fail("string length")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *metaReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s out of range", errBadMeta, what)
	}
	r.b = nil
}
