package generation

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	// Aliased: this package's own layout is the Parquet shape (layout.go).
	paths "github.com/rollwal/rollwal/layout"
)

// File names are wire format: the engine lists directories and parses them,
// and operators read them. Never change the layout of a FormatVersion.
const (
	namePrefix   = "g"
	epochPrefix  = "-e"
	nameSuffix   = ".parquet"
	tempPrefix   = ".tmp-"
	numberDigits = 20 // enough for any uint64, so names sort numerically
	attemptLen   = 8  // hex characters of an attempt id
)

// nameLen is the length of every valid generation file name.
const nameLen = len(namePrefix) + numberDigits + len(epochPrefix) + numberDigits + 1 + attemptLen + len(nameSuffix)

// Name returns the file name of an attempt at writing generation gen in
// epoch epoch:
//
//	g<gen, 20 digits>-e<epoch, 20 digits>-<attempt, 8 hex>.parquet
//
// Zero padding makes lexical order equal numeric order. attempt must be 8
// lowercase hex characters; Write chooses it at random, so every attempt has
// its own name. Name panics on a malformed attempt (a programming error).
func Name(gen, epoch uint64, attempt string) string {
	if !validAttempt(attempt) {
		panic(fmt.Sprintf("generation: invalid attempt %q (want %d lowercase hex characters)", attempt, attemptLen))
	}
	return fmt.Sprintf("%s%020d%s%020d-%s%s", namePrefix, gen, epochPrefix, epoch, attempt, nameSuffix)
}

// ParseName is the inverse of Name. It refuses anything Name cannot
// produce: other lengths, missing padding, signs, uppercase hex, numbers
// beyond uint64, temp files and paths.
func ParseName(name string) (gen, epoch uint64, attempt string, err error) {
	bad := func(why string) (uint64, uint64, string, error) {
		return 0, 0, "", fmt.Errorf("generation: %q is not a generation file name (%s; want g<20 digits>-e<20 digits>-<8 hex>.parquet)", name, why)
	}
	if len(name) != nameLen {
		return bad("wrong length")
	}
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return bad("no g prefix")
	}
	if gen, ok = parseNumber(rest[:numberDigits]); !ok {
		return bad("bad generation number")
	}
	rest, ok = strings.CutPrefix(rest[numberDigits:], epochPrefix)
	if !ok {
		return bad("no -e separator")
	}
	if epoch, ok = parseNumber(rest[:numberDigits]); !ok {
		return bad("bad epoch")
	}
	rest, ok = strings.CutPrefix(rest[numberDigits:], "-")
	if !ok {
		return bad("no - before the attempt")
	}
	attempt, ok = strings.CutSuffix(rest, nameSuffix)
	if !ok || !validAttempt(attempt) {
		return bad("bad attempt or suffix")
	}
	return gen, epoch, attempt, nil
}

// parseNumber parses exactly numberDigits decimal digits.
func parseNumber(s string) (uint64, bool) {
	if len(s) != numberDigits {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

func validAttempt(a string) bool {
	if len(a) != attemptLen {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// newAttempt returns a random attempt id.
func newAttempt() string {
	var b [attemptLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// IsTemp reports whether a directory entry is the temporary file of a write
// that has not finished (or never will: a crash leaves these behind). Such
// files are garbage once no Write is running in the directory.
func IsTemp(name string) bool { return strings.HasPrefix(name, tempPrefix) }

func tempName(final string) string { return tempPrefix + final }

// crcPrefix separates a base file name's index checksum.
const crcPrefix = "-c"

// BaseName is the name of a base file that carries its own index
// checksum (Options.IndexCRCInName):
//
//	g<gen, 20 digits>-e<epoch, 20 digits>-<attempt, 8 hex>-c<IndexCRC, 8 hex>.parquet
//
// The checksum covers every byte outside the column chunks, not the name,
// so it can be named only once the file is written.
func BaseName(gen, epoch uint64, attempt string, indexCRC uint32) string {
	n := Name(gen, epoch, attempt)
	return fmt.Sprintf("%s%s%08x%s", strings.TrimSuffix(n, nameSuffix), crcPrefix, indexCRC, nameSuffix)
}

// ParseBaseName is the inverse of BaseName. ok is false for a name that
// carries no checksum (a Name, or a base file written before BaseName
// existed); err is set only for a name that looks like a BaseName but is
// malformed.
func ParseBaseName(name string) (gen, epoch uint64, attempt string, indexCRC uint32, ok bool, err error) {
	if len(name) != nameLen+len(crcPrefix)+8 {
		return 0, 0, "", 0, false, nil
	}
	stem, sum := name[:nameLen-len(nameSuffix)], name[nameLen-len(nameSuffix):]
	hexCRC, found := strings.CutPrefix(strings.TrimSuffix(sum, nameSuffix), crcPrefix)
	if !found || !strings.HasSuffix(sum, nameSuffix) || !validAttempt(hexCRC) {
		return 0, 0, "", 0, false, fmt.Errorf("generation: %q is not a base file name (bad checksum suffix; want g<20 digits>-e<20 digits>-<8 hex>-c<8 hex>.parquet)", name)
	}
	if gen, epoch, attempt, err = ParseName(stem + nameSuffix); err != nil {
		return 0, 0, "", 0, false, err
	}
	v, _ := strconv.ParseUint(hexCRC, 16, 32) // validAttempt: 8 lowercase hex
	return gen, epoch, attempt, uint32(v), true, nil
}

// ObjectKey is the name of a shard's generation file in an object store
// (objstore.Store): layout.GenerationKey, kept here beside the file names
// for the callers that know a generation by them.
func ObjectKey(table, shard, file string) string {
	return paths.GenerationKey(table, shard, file)
}
