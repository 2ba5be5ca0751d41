package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rollwal/rollwal/schema"
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
// A kind 1 record may hold no rows (every row was a duplicate): it then
// covers one WAL position, which no row takes, and only carries its meta.
const (
	kindBatch     uint8 = 0
	kindMetaBatch uint8 = 1
)

// RecordMeta is what a WAL record carries besides its rows.
type RecordMeta struct {
	Producer Producer
	// Count is the producer batch's row count (duplicates included): the
	// record moves the producer's next expected sequence to Seq+Count.
	Count  uint64
	Source Source
	Millis int64
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
// tools that read a shard's WAL: verify, dump): its meta and its rows,
// checked against the positions the header covers.
func DecodeRecord(sch *schema.Schema, h wal.Header, payload []byte) (RecordMeta, *schema.Batch, error) {
	m, b, err := decodeRecord(sch, h.Kind, payload)
	if err != nil {
		return m, nil, err
	}
	if want := int(h.Count); b.Len() != want && !(h.Kind == kindMetaBatch && b.Len() == 0 && want == 1) {
		return m, nil, fmt.Errorf("%d rows, the header covers %d positions", b.Len(), want)
	}
	return m, b, nil
}

// decodeRecord splits a WAL payload of the given kind into its meta and
// its batch.
func decodeRecord(sch *schema.Schema, kind uint8, payload []byte) (RecordMeta, *schema.Batch, error) {
	var m RecordMeta
	switch kind {
	case kindBatch:
	case kindMetaBatch:
		var err error
		if m, payload, err = decodeMeta(payload); err != nil {
			return m, nil, err
		}
	default:
		return m, nil, fmt.Errorf("%w: unknown record kind %d", errBadMeta, kind)
	}
	b, err := sch.Decode(payload)
	return m, b, err
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
