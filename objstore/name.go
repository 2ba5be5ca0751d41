package objstore

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// MaxNameLen bounds a name in bytes. S3 keys hold 1024 bytes, and the
	// store's prefix takes part of that.
	MaxNameLen = 512
	// maxSegmentLen leaves room within a filesystem's 255-byte file name
	// for the temporary file's suffix.
	maxSegmentLen = 200
	// TempSuffix ends the name of a file:// Create's temporary file; no
	// name segment may end in it, so a leftover temporary file is never an
	// object.
	TempSuffix = ".objstore-tmp"
)

// ValidateName reports whether name is a valid object name, with an error
// that wraps ErrInvalidName and quotes the name.
func ValidateName(name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidName, name, err)
	}
	return nil
}

// validatePrefix accepts "", a valid name, or a valid name and a slash.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := checkName(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("%w: prefix %q: %s", ErrInvalidName, prefix, err)
	}
	return nil
}

type nameError string

func (e nameError) Error() string { return string(e) }

func checkName(name string) error {
	switch {
	case name == "":
		return nameError("empty")
	case len(name) > MaxNameLen:
		return nameError(fmt.Sprintf("%d bytes, more than %d", len(name), MaxNameLen))
	case !utf8.ValidString(name):
		return nameError("not valid UTF-8")
	case strings.HasPrefix(name, "/"):
		return nameError("begins with a slash")
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == '\\' {
			return nameError(fmt.Sprintf("holds the character %U", r))
		}
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch {
		case seg == "":
			return nameError("has an empty segment")
		case seg == "." || seg == "..":
			return nameError(fmt.Sprintf("has a %q segment", seg))
		case len(seg) > maxSegmentLen:
			return nameError(fmt.Sprintf("has a segment of %d bytes, more than %d", len(seg), maxSegmentLen))
		case strings.HasSuffix(seg, TempSuffix):
			return nameError(fmt.Sprintf("has a segment ending in the reserved %q", TempSuffix))
		}
	}
	return nil
}
