package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/rollwal/rollwal/errs"
)

// arrow-go trusts the lengths inside IPC metadata: it makes slices of
// the claimed number of fields or metadata entries before reading them, and
// (in v18.8.0) ipc.NewReader drops the body and metadata size limits. A
// request of a few bytes could so make the server allocate gigabytes, a
// crash no recover catches. guardedReader frames the stream itself, reading
// only bytes that arrived, and checks those lengths before arrow-go parses
// a message.

// errMessageTooLarge marks a message that claims more bytes than a request
// may hold: the answer is 413, as for a body over the limit.
var errMessageTooLarge = errs.New(errs.TooLarge, "message larger than the request body may be")

// maxArrowEntries bounds the fields (nested ones included) and custom
// metadata entries of one message.
const maxArrowEntries = 4096

// guardedReader is an ipc.MessageReader over an IPC stream.
type guardedReader struct {
	r     io.Reader
	limit int64 // of one message's metadata and of its body
	// budget bounds the uncompressed bytes of the buffers of all record
	// batches; decoded is what the batches read so far declare.
	budget, decoded int64
	// left is what the request's Content-Length says is still to come,
	// -1 when it declared none.
	left int64
	// views is the number of utf8_view and binary_view arrays of a record
	// batch, as the stream's schema has them.
	views int
	msg   *ipc.Message
	refs  atomic.Int64
	// bodies allocates the buffers bodies are read into.
	bodies memory.Allocator
}

func newGuardedReader(r io.Reader, limit, budget, size int64) *guardedReader {
	g := &guardedReader{r: r, limit: limit, budget: budget, left: -1, bodies: bodies}
	if size > 0 {
		g.left = size
	}
	g.refs.Add(1)
	return g
}

func (g *guardedReader) Retain() { g.refs.Add(1) }

func (g *guardedReader) Release() {
	if g.refs.Add(-1) == 0 && g.msg != nil {
		g.msg.Release()
		g.msg = nil
	}
}

// Message reads the next message; io.EOF at the end-of-stream marker or
// at a clean end of the body.
func (g *guardedReader) Message() (*ipc.Message, error) {
	n, err := g.metadataLen()
	if err != nil {
		return nil, err
	}
	meta, err := g.read(int64(n), "message metadata")
	if err != nil {
		return nil, err
	}
	bodyLen, views, err := checkMetadata(meta)
	if err != nil {
		return nil, err
	}
	if views >= 0 {
		g.views = views
	}
	body, err := g.readBody(bodyLen)
	if err != nil {
		return nil, err
	}
	if err := g.charge(meta, body.Bytes()); err != nil {
		body.Release()
		return nil, err
	}
	if g.msg != nil {
		g.msg.Release()
	}
	g.msg = ipc.NewMessage(memory.NewBufferBytes(meta), body)
	body.Release() // the message holds it now
	return g.msg, nil
}

// readBody reads a message body of n bytes into a buffer of the body
// pool (arrowbody.go) when the request declared that many bytes still to
// come; otherwise as read does.
func (g *guardedReader) readBody(n int64) (*memory.Buffer, error) {
	if n <= 0 || n > g.limit || n > g.left {
		b, err := g.read(n, "message body")
		if err != nil {
			return nil, err
		}
		return memory.NewBufferBytes(b), nil
	}
	buf := newBody(g.bodies, int(n))
	if _, err := io.ReadFull(g.r, buf.Bytes()); err != nil {
		buf.Release()
		return nil, fmt.Errorf("reading the message body: %w", noEOF(err))
	}
	g.consumed(n)
	return buf, nil
}

// metadataLen reads a message's prefix: the continuation marker and the
// metadata length. The pre-0.15 format without the marker (from 2019 and
// before) is refused, so that a body that is no Arrow at all is named as
// such rather than read as a huge length.
func (g *guardedReader) metadataLen() (int32, error) {
	var b [8]byte
	if _, err := io.ReadFull(g.r, b[:4]); err != nil {
		if err == io.EOF {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("reading a message prefix: %w", err)
	}
	g.consumed(4)
	switch binary.LittleEndian.Uint32(b[:4]) {
	case 0: // the legacy end-of-stream marker
		return 0, io.EOF
	case 0xFFFFFFFF:
	default:
		return 0, fmt.Errorf("a message starts with % x, not the continuation marker ff ff ff ff", b[:4])
	}
	if _, err := io.ReadFull(g.r, b[4:]); err != nil {
		return 0, fmt.Errorf("reading a message length: %w", noEOF(err))
	}
	g.consumed(4)
	n := int32(binary.LittleEndian.Uint32(b[4:]))
	switch {
	case n == 0:
		return 0, io.EOF
	case n < 8:
		return 0, fmt.Errorf("message metadata length %d is below 8", n)
	case int64(n) > g.limit:
		return 0, fmt.Errorf("%w: metadata of %d bytes, the limit is %d", errMessageTooLarge, n, g.limit)
	}
	return n, nil
}

// read reads n bytes. Where the request declared its length and n fits in
// what is left of it, the buffer is allocated at its size: the request
// reserved those bytes before it was admitted. Otherwise it grows with
// what arrives rather than with what the stream claims.
func (g *guardedReader) read(n int64, what string) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("%s length %d is negative", what, n)
	}
	if n > g.limit {
		return nil, fmt.Errorf("%w: %s of %d bytes, the limit is %d", errMessageTooLarge, what, n, g.limit)
	}
	var buf []byte
	var err error
	if n <= g.left {
		buf = make([]byte, n)
		_, err = io.ReadFull(g.r, buf)
	} else {
		buf, err = readGrowing(g.r, n)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s: %w", what, noEOF(err))
	}
	g.consumed(n)
	return buf, nil
}

// consumed counts n bytes off what the request has left to send.
func (g *guardedReader) consumed(n int64) {
	if g.left >= 0 {
		g.left = max(g.left-n, 0)
	}
}

// readGrowing reads n bytes into a buffer that doubles, from 64 KiB, as
// they arrive, to exactly n: it allocates about 2 n in all and holds at
// most 1.5 n while it grows.
func readGrowing(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, min(n, 64<<10))
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	for int64(len(buf)) < n {
		next := make([]byte, min(n, 2*int64(len(buf))))
		copy(next, buf)
		if _, err := io.ReadFull(r, next[len(buf):]); err != nil {
			return nil, err
		}
		buf = next
	}
	return buf, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Slots of the Arrow flatbuffer tables (Message.fbs, Schema.fbs) that the
// check reads: 4 + 2 × the field's index.
const (
	slotMessageHeaderType = 6
	slotMessageHeader     = 8
	slotMessageBodyLength = 10
	slotMessageMetadata   = 12
	slotRecordBatchBufs   = 8
	slotRecordCompression = 10
	slotRecordVariadic    = 12
	slotDictionaryData    = 6
	slotSchemaFields      = 6
	slotSchemaMetadata    = 8
	slotFieldTypeType     = 8
	slotFieldDictionary   = 12
	slotFieldChildren     = 14
	slotFieldMetadata     = 16
	typeBinaryView        = 23 // of the Type union
	typeUtf8View          = 24
	headerSchema          = 1
	headerDictionaryBatch = 2
	headerRecordBatch     = 3
)

// charge adds the uncompressed size of a record or dictionary batch's
// buffers to what the stream decoded, and refuses the message when that
// passes the budget. A compressed buffer declares its uncompressed length
// in its first 8 bytes (-1: stored uncompressed); arrow-go allocates that
// length and decompresses into it, so the check comes before either.
func (g *guardedReader) charge(meta, body []byte) (err error) {
	defer func() {
		if p := recover(); p != nil { // an offset pointing outside meta
			err = fmt.Errorf("malformed message metadata: %v", p)
		}
	}()
	n, err := batchBytes(meta, body, g.views)
	if err != nil {
		return err
	}
	if g.decoded += n; g.decoded > g.budget {
		return fmt.Errorf("%w: the stream's buffers decode to more than %d bytes (%d up to this record batch); send fewer or smaller rows",
			errDecodedTooLarge, g.budget, g.decoded)
	}
	return nil
}

// batchBytes is the uncompressed size of the buffers of a record or
// dictionary batch message; 0 for other messages. views is the number of
// view arrays in a record batch (none is in a dictionary batch: schema
// refuses them).
func batchBytes(meta, body []byte, views int) (int64, error) {
	msg := flatbuffers.Table{Bytes: meta, Pos: flatbuffers.GetUOffsetT(meta)}
	o := flatbuffers.UOffsetT(msg.Offset(slotMessageHeader))
	var rb flatbuffers.Table
	switch msg.GetByteSlot(slotMessageHeaderType, 0) {
	case headerRecordBatch:
		if o == 0 {
			return 0, errors.New("record batch message without a record batch")
		}
		msg.Union(&rb, o)
	case headerDictionaryBatch:
		if o == 0 {
			return 0, errors.New("dictionary batch message without a dictionary batch")
		}
		var db flatbuffers.Table
		msg.Union(&db, o)
		d := flatbuffers.UOffsetT(db.Offset(slotDictionaryData))
		if d == 0 {
			return 0, nil
		}
		rb = flatbuffers.Table{Bytes: meta, Pos: db.Indirect(db.Pos + d)}
		views = 0
	default:
		return 0, nil
	}
	compressed := rb.Offset(slotRecordCompression) != 0
	var start flatbuffers.UOffsetT
	n := 0
	if v := flatbuffers.UOffsetT(rb.Offset(slotRecordBatchBufs)); v != 0 {
		start, n = rb.Vector(v), rb.VectorLen(v)
	}
	if int64(start)+16*int64(n) > int64(len(meta)) {
		return 0, fmt.Errorf("metadata claims %d buffers in %d bytes", n, len(meta))
	}
	if err := checkVariadic(&rb, n, views); err != nil {
		return 0, err
	}
	var total int64
	for i := range n {
		pos := start + flatbuffers.UOffsetT(16*i) // struct Buffer { offset: long; length: long }
		off, length := flatbuffers.GetInt64(meta[pos:]), flatbuffers.GetInt64(meta[pos+8:])
		if off < 0 || length < 0 || off > int64(len(body)) || length > int64(len(body))-off {
			return 0, fmt.Errorf("buffer %d at %d+%d lies outside the %d-byte message body", i, off, length, len(body))
		}
		size := length
		if compressed && length > 0 {
			if length < 8 {
				return 0, fmt.Errorf("compressed buffer %d of %d bytes has no length prefix", i, length)
			}
			switch declared := int64(binary.LittleEndian.Uint64(body[off:])); {
			case declared == -1: // stored uncompressed after the prefix
				size = length - 8
			case declared < 0:
				return 0, fmt.Errorf("compressed buffer %d declares %d bytes uncompressed", i, declared)
			default:
				size = declared
			}
		}
		if total += size; total < 0 || size < 0 {
			return 0, fmt.Errorf("buffer sizes overflow")
		}
	}
	return total, nil
}

// checkVariadic refuses variadic buffer counts (one per utf8_view and
// binary_view array) that claim more buffers than the message's n, or
// fewer counts than the views arrays: arrow-go makes a slice of each
// count before it reads a buffer, a slice of 2^40 is a crash no recover
// catches, and it reads a count past the vector's end unchecked. With no
// vector it reads 0s.
func checkVariadic(rb *flatbuffers.Table, n, views int) error {
	v := flatbuffers.UOffsetT(rb.Offset(slotRecordVariadic))
	if v == 0 {
		return nil
	}
	start, counts := rb.Vector(v), rb.VectorLen(v)
	switch {
	case int64(start)+8*int64(counts) > int64(len(rb.Bytes)):
		return fmt.Errorf("metadata claims %d variadic buffer counts in %d bytes", counts, len(rb.Bytes))
	case counts < views:
		return fmt.Errorf("the record batch has %d variadic buffer counts for %d view arrays", counts, views)
	}
	left := int64(n)
	for i := range counts {
		c := flatbuffers.GetInt64(rb.Bytes[start+flatbuffers.UOffsetT(8*i):])
		if c < 0 || c > left {
			return fmt.Errorf("a view array claims %d variadic buffers; the record batch has %d buffers", c, n)
		}
		left -= c
	}
	return nil
}

// checkMetadata checks that the vectors arrow-go sizes allocations by
// fit inside the metadata and stay within maxArrowEntries, and returns the
// message's body length and, for a schema, the number of its view arrays
// (-1 for other messages).
func checkMetadata(meta []byte) (bodyLen int64, views int, err error) {
	defer func() {
		if p := recover(); p != nil { // an offset pointing outside meta
			err = fmt.Errorf("malformed message metadata: %v", p)
		}
	}()
	c := &fbCheck{buf: meta, budget: maxArrowEntries}
	msg := flatbuffers.Table{Bytes: meta, Pos: flatbuffers.GetUOffsetT(meta)}
	if err := c.entries(&msg, slotMessageMetadata); err != nil {
		return 0, 0, err
	}
	views = -1
	if msg.GetByteSlot(slotMessageHeaderType, 0) == headerSchema {
		if err := c.schema(&msg); err != nil {
			return 0, 0, err
		}
		views = c.views
	}
	return msg.GetInt64Slot(slotMessageBodyLength, 0), views, nil
}

type fbCheck struct {
	buf    []byte
	budget int
	views  int // utf8_view and binary_view fields
}

func (c *fbCheck) schema(msg *flatbuffers.Table) error {
	o := flatbuffers.UOffsetT(msg.Offset(slotMessageHeader))
	if o == 0 {
		return errors.New("schema message without a schema")
	}
	var sc flatbuffers.Table
	msg.Union(&sc, o)
	if err := c.entries(&sc, slotSchemaMetadata); err != nil {
		return err
	}
	return c.fields(&sc, slotSchemaFields, 0, false)
}

// fields checks a vector of Field tables and, recursively, their children,
// and counts their view fields; inDict is set below a dictionary-encoded
// field.
func (c *fbCheck) fields(t *flatbuffers.Table, slot flatbuffers.VOffsetT, depth int, inDict bool) error {
	if depth > 32 {
		return errors.New("fields nest more than 32 deep")
	}
	start, n, err := c.vector(t, slot)
	if err != nil {
		return err
	}
	for i := range n {
		f := flatbuffers.Table{Bytes: c.buf, Pos: t.Indirect(start + flatbuffers.UOffsetT(4*i))}
		if err := c.entries(&f, slotFieldMetadata); err != nil {
			return err
		}
		dict := inDict || f.Offset(slotFieldDictionary) != 0
		if err := c.view(&f, dict); err != nil {
			return err
		}
		if err := c.fields(&f, slotFieldChildren, depth+1, dict); err != nil {
			return err
		}
	}
	return nil
}

// view counts a utf8_view or binary_view field. One in a dictionary is
// refused: its arrays are in dictionary batches, whose counts would need
// the dictionary's type to check, and no column needs one.
func (c *fbCheck) view(f *flatbuffers.Table, inDict bool) error {
	switch f.GetByteSlot(slotFieldTypeType, 0) {
	case typeBinaryView, typeUtf8View:
		if inDict {
			return errors.New("a dictionary of utf8_view or binary_view values is not accepted; send utf8 or binary values")
		}
		c.views++
	}
	return nil
}

// entries checks a vector of offsets (custom metadata) without walking it.
func (c *fbCheck) entries(t *flatbuffers.Table, slot flatbuffers.VOffsetT) error {
	_, _, err := c.vector(t, slot)
	return err
}

// vector returns the start and length of a vector of 4-byte offsets,
// charging its length to the budget.
func (c *fbCheck) vector(t *flatbuffers.Table, slot flatbuffers.VOffsetT) (flatbuffers.UOffsetT, int, error) {
	o := flatbuffers.UOffsetT(t.Offset(slot))
	if o == 0 {
		return 0, 0, nil
	}
	start, n := t.Vector(o), t.VectorLen(o)
	if int64(start)+4*int64(n) > int64(len(c.buf)) {
		return 0, 0, fmt.Errorf("metadata claims a vector of %d entries in %d bytes", n, len(c.buf))
	}
	if c.budget -= n; c.budget < 0 {
		return 0, 0, fmt.Errorf("more than %d fields and metadata entries", maxArrowEntries)
	}
	return start, n, nil
}

// limitedAllocator refuses, by panicking (arrow-go's allocators have no
// error return; its reader recovers), to hold more than limit bytes:
// compressed buffers claim their decompressed size, which is not bounded by
// the body.
type limitedAllocator struct {
	memory.Allocator
	limit int64
	used  atomic.Int64
}

var errAllocLimit = fmt.Errorf("%w: the stream needs more memory than the request may use", errMessageTooLarge)

func (a *limitedAllocator) Allocate(size int) []byte {
	if a.used.Add(int64(size)) > a.limit {
		a.used.Add(-int64(size))
		panic(fmt.Errorf("%w (%d bytes)", errAllocLimit, a.limit))
	}
	return a.Allocator.Allocate(size)
}

func (a *limitedAllocator) Reallocate(size int, b []byte) []byte {
	if a.used.Add(int64(size-len(b))) > a.limit {
		a.used.Add(-int64(size - len(b)))
		panic(fmt.Errorf("%w (%d bytes)", errAllocLimit, a.limit))
	}
	return a.Allocator.Reallocate(size, b)
}

func (a *limitedAllocator) Free(b []byte) {
	a.used.Add(-int64(len(b)))
	a.Allocator.Free(b)
}
