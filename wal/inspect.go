package wal

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/rollwal/rollwal/vfs"
)

// Record is one record as Scan read it.
type Record struct {
	Header
	// Segment is the file name of the record's segment, Offset its byte
	// offset there, Size its bytes on disk (header included).
	Segment string
	Offset  int64
	Size    int64
	// Compression is the codec the payload was stored with; RawSize the
	// payload's decoded size.
	Compression Compression
	RawSize     int64
	// Payload is the decoded payload when ScanOptions.Payloads is set
	// (else nil); it is valid only during the callback.
	Payload []byte
}

// SegmentInfo describes one segment file as Scan found it.
type SegmentInfo struct {
	Name         string
	Epoch, Index uint64
	// Size is the file's size; End the offset just past its last whole
	// record, the end of data (zeros reserved past it are not damage).
	Size, End int64
	Records   int
	// FirstPos and LastPos are the positions the records cover; both 0
	// when the segment holds none.
	FirstPos, LastPos uint64
	// LastOfEpoch marks the epoch's last segment: the only one where Open
	// tolerates bytes after End.
	LastOfEpoch bool
}

// Tail is damage at the end of an epoch's last segment that Open passes
// over: a torn record, or a hole of zeros with a zombie's records after it.
// Open truncates it only when its own epoch reopens; otherwise the bytes
// stay on disk, unread.
type Tail struct {
	Segment string
	Offset  int64 // where the first bad record starts (SegmentInfo.End)
	Bytes   int64 // bytes from Offset to the end of the file
	Hole    bool
	Reason  error
}

// ScanReport sums up what Scan read.
type ScanReport struct {
	Segments []SegmentInfo
	Records  int
	Bytes    int64 // of whole records, headers included
	Tails    []Tail
	// Spares names the spare files (see Options.Spares) and the files a
	// roll was recycling when its writer stopped: they hold no record of
	// the log, and Scan does not read them.
	Spares []string
}

// ScanOptions configure Scan. Only FS and Dir are required.
type ScanOptions struct {
	// FS is the filesystem; nil means vfs.Default.
	FS  vfs.FS
	Dir string
	// Payloads makes Scan decode every payload, which checks that it
	// decompresses (a failure is corruption) and fills Record.Payload.
	Payloads bool
	// Record, if set, is called with every whole record in file order
	// (by epoch, then index, then offset). Its error stops the scan and is
	// returned as is.
	Record func(Record) error
	// Segment, if set, is called after each segment is read, with its
	// 1-based number among total: long scans report progress through it.
	Segment func(n, total int, s SegmentInfo)
}

// Scan reads every segment of the WAL in Dir, read-only, and checks it as
// Open would: records whole, CRCs valid, fields valid, each epoch's
// positions dense across its segments. Damage Open refuses stops the scan
// with a *CorruptionError naming the segment and offset (errors.Is(err,
// ErrCorruption)); the report then covers what was read before it. Damage
// Open passes over (see Tail) is listed in the report and the scan goes
// on. Scan never opens a file for writing, so it is safe to run on the
// directory of a stopped writer, and on a running writer's for a view that
// may end in its write in progress.
func Scan(opts ScanOptions) (ScanReport, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	segs, spares, err := listScanSegments(opts.FS, opts.Dir)
	if err != nil {
		return ScanReport{}, err
	}
	c, err := newCodec(None)
	if err != nil {
		return ScanReport{}, err
	}
	defer c.close()
	sc := &scanner{opts: opts, codec: c, rep: ScanReport{Spares: spares}}
	for i := range segs {
		if err := sc.segment(&segs[i]); err != nil {
			return sc.rep, err
		}
		if opts.Segment != nil {
			opts.Segment(i+1, len(segs), segs[i])
		}
	}
	return sc.rep, nil
}

// listScanSegments lists the segments by epoch, then index, marking each
// epoch's last, and the names of the spare and recycling files. Any other
// name is an error, as for Open.
func listScanSegments(fsys vfs.FS, dir string) ([]SegmentInfo, []string, error) {
	names, err := fsys.List(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var segs []SegmentInfo
	var spares []string
	for _, name := range names { // sorted, and zero-padded names sort by epoch, then index
		kind, epoch, index, ok := parseFileName(name)
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("wal: unexpected file %q in the WAL directory %s", name, dir)
		case kind == segmentFile:
			segs = append(segs, SegmentInfo{Name: name, Epoch: epoch, Index: index})
		default:
			spares = append(spares, name)
		}
	}
	for i := range segs {
		segs[i].LastOfEpoch = i == len(segs)-1 || segs[i+1].Epoch != segs[i].Epoch
	}
	return segs, spares, nil
}

// scanner carries Scan's state across segments.
type scanner struct {
	opts    ScanOptions
	codec   *codec
	scratch []byte
	rep     ScanReport
	epoch   uint64 // the epoch of the segments read so far
	next    uint64 // the position that epoch's next record must start at; 0: any
}

// segment reads one segment and files it in the report.
func (sc *scanner) segment(s *SegmentInfo) error {
	if s.Epoch != sc.epoch {
		sc.epoch, sc.next = s.Epoch, 0
	}
	f, err := sc.opts.FS.Open(filepath.Join(sc.opts.Dir, s.Name))
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	s.Size = info.Size()
	res, err := sc.records(f, s)
	sc.rep.Segments = append(sc.rep.Segments, *s)
	if err != nil {
		return err
	}
	return sc.judgeEnd(s, res)
}

// records visits the segment's whole records up to the first bad bytes, or
// the first record older than the segment's first, and classifies what
// follows them, as scanSegment does for Open.
func (sc *scanner) records(f vfs.File, s *SegmentInfo) (scanResult, error) {
	w := &window{r: f, size: s.Size}
	var floor uint64
	for off := int64(0); off < s.Size; {
		h, stored, err := w.next(s.Name, s.Epoch, off)
		var ce *CorruptionError
		if errors.As(err, &ce) && !errors.Is(ce.Err, errInvalid) {
			return classifyTail(f, s.Size, s.Name, s.Epoch, floor, off, ce.Err)
		}
		if err != nil {
			return scanResult{}, err
		}
		if olderRecord(h, floor) {
			return classifyTail(f, s.Size, s.Name, s.Epoch, floor, off, olderError(h, floor))
		}
		if floor == 0 {
			floor = h.FirstPos
		}
		if err := sc.record(s, h, off, stored); err != nil {
			return scanResult{}, err
		}
		off += h.size()
		s.End = off
	}
	return scanResult{end: s.End}, nil
}

// record checks that a record continues its epoch's positions, decodes it
// if asked, and hands it to the caller.
func (sc *scanner) record(s *SegmentInfo, h recordHeader, off int64, stored []byte) error {
	if sc.next != 0 && h.FirstPos != sc.next {
		return &CorruptionError{Segment: s.Name, Offset: off,
			Err: fmt.Errorf("%w: record of epoch %d starts at position %d, expected %d", errGap, s.Epoch, h.FirstPos, sc.next)}
	}
	r := Record{Header: h.Header, Segment: s.Name, Offset: off, Size: h.size(),
		Compression: h.codec, RawSize: int64(h.rawLength)}
	if sc.opts.Payloads {
		p, err := sc.codec.decompress(h, stored, sc.scratch)
		if err != nil {
			return &CorruptionError{Segment: s.Name, Offset: off, Err: err}
		}
		if h.codec != None {
			sc.scratch = p
		}
		r.Payload = p
	}
	if sc.opts.Record != nil {
		if err := sc.opts.Record(r); err != nil {
			return err
		}
	}
	if s.Records == 0 {
		s.FirstPos = h.FirstPos
	}
	s.Records++
	s.LastPos, sc.next = h.lastPos(), h.lastPos()+1
	sc.rep.Records++
	sc.rep.Bytes += h.size()
	return nil
}

// judgeEnd applies Open's policy to the bytes after the segment's last
// whole record: a torn tail, a hole or a spare's rest is tolerated in an
// epoch's last segment only, since every other segment was synced whole,
// and cut to its records if recycled, before the next one was created. A
// spare's rest is no damage: it is not listed among the tails.
func (sc *scanner) judgeEnd(s *SegmentInfo, res scanResult) error {
	if !res.torn && !res.hole && !res.stale {
		return nil
	}
	if !s.LastOfEpoch {
		return &CorruptionError{Segment: s.Name, Offset: res.end,
			Err: fmt.Errorf("damage in a segment that is not the last of epoch %d: %w", s.Epoch, res.why)}
	}
	if res.stale {
		return nil
	}
	sc.rep.Tails = append(sc.rep.Tails, Tail{Segment: s.Name, Offset: res.end,
		Bytes: s.Size - res.end, Hole: res.hole, Reason: res.why})
	return nil
}
