package generation

import (
	"cmp"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/parquet-go/parquet-go"
)

// The index checksum covers every byte of a file outside its column chunks:
// the bloom filters (parquet-go writes them between row groups), the column
// and offset indexes, the Thrift footer. Data pages carry their own CRC-32
// and the rollwal.* footer pairs a checksum, but Parquet protects nothing
// else, and a flipped bit there reads without error. Rows read are never
// wrong for it; but a reader that lets bloom filters or statistics decide
// what to skip (the merge's ID check) would silently skip, so it compares
// the file against a checksum kept outside it before trusting them.
//
// Which bytes are covered follows from the footer; a damaged footer covers
// different bytes, or itself differs, so the checksum still changes.

// VerifyIndex checks the file r (size bytes, named path in errors) against
// the index checksum want; a mismatch is a *CorruptError.
func VerifyIndex(r io.ReaderAt, size int64, path string, want uint32) error {
	got, err := IndexCRC(r, size)
	if err != nil {
		return corrupt(path, "computing the index checksum", err)
	}
	if got != want {
		reason := fmt.Sprintf("index checksum %08x, recorded %08x (bloom filters, page indexes or footer damaged)", got, want)
		return corrupt(path, reason, nil)
	}
	return nil
}

// IndexCRC is the CRC-32C of the bytes of r outside its column chunks.
func IndexCRC(r io.ReaderAt, size int64) (uint32, error) {
	if err := checkFrame(r, size); err != nil {
		return 0, err
	}
	var pf *parquet.File
	err := safely(func() (err error) {
		pf, err = parquet.OpenFile(r, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
		return err
	})
	if err != nil {
		return 0, err
	}
	chunks, err := chunkRanges(pf, size)
	if err != nil {
		return 0, err
	}
	h := crc32.New(castagnoli)
	at := int64(0)
	for _, c := range append(chunks, [2]int64{size, size}) {
		if c[0] > at {
			if _, err := io.Copy(h, io.NewSectionReader(r, at, c[0]-at)); err != nil {
				return 0, err
			}
		}
		at = max(at, c[1])
	}
	return h.Sum32(), nil
}

// chunkRanges returns the column chunks' byte ranges, sorted.
func chunkRanges(pf *parquet.File, size int64) ([][2]int64, error) {
	var out [][2]int64
	for _, rg := range pf.Metadata().RowGroups {
		for _, cc := range rg.Columns {
			start := cc.MetaData.DataPageOffset
			if d := cc.MetaData.DictionaryPageOffset; d > 0 && d < start {
				start = d
			}
			end := start + cc.MetaData.TotalCompressedSize
			if start < 0 || end < start || end > size {
				return nil, fmt.Errorf("column chunk [%d, %d) outside the file's %d bytes", start, end, size)
			}
			out = append(out, [2]int64{start, end})
		}
	}
	slices.SortFunc(out, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	return out, nil
}
