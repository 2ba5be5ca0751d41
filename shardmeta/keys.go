package shardmeta

import (
	"fmt"
	"strings"

	"github.com/rollwal/rollwal/layout"
)

// MaxNameLen bounds a prefix segment, table or shard name.
const MaxNameLen = 128

// Keys names a table's etcd keys:
//
//	/<prefix>/<table>/shards/<shard>/epoch      epoch counter, decimal, no lease
//	/<prefix>/<table>/shards/<shard>/owner      Owner JSON, bound to the owner's lease
//	/<prefix>/<table>/shards/<shard>/manifest   Manifest JSON, no lease
//
// Prefix is one or more names joined by "/" (no leading or trailing "/");
// Table and shard names are single names. A name is 1 to 128 characters of
// [A-Za-z0-9._-] and neither "." nor "..". The methods build strings and do
// not validate; Validate and ValidateShard do, and every Store method calls
// them first.
type Keys struct {
	Prefix, Table string
}

// Validate checks Prefix and Table.
func (k Keys) Validate() error {
	if k.Prefix == "" {
		return fmt.Errorf("%w: prefix is empty", ErrInvalidName)
	}
	for _, seg := range strings.Split(k.Prefix, "/") {
		if err := validName("prefix segment", seg); err != nil {
			return fmt.Errorf("%w (prefix %q)", err, k.Prefix)
		}
	}
	if err := validName("table", k.Table); err != nil {
		return err
	}
	if layout.OwnEntry(k.Table) {
		return fmt.Errorf("%w: table name %q is reserved: the data directory holds a file or directory of that name (layout.OwnEntry)", ErrInvalidName, k.Table)
	}
	return nil
}

// ValidateShard checks a shard name.
func ValidateShard(shard string) error { return validName("shard", shard) }

func validName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s name is empty", ErrInvalidName, kind)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %s name %.20q... is %d bytes, more than %d",
			ErrInvalidName, kind, name, len(name), MaxNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %s name %q is reserved", ErrInvalidName, kind, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isNameByte(c) {
			return fmt.Errorf("%w: %s name %q has %q at byte %d; allowed are A-Z a-z 0-9 . _ -",
				ErrInvalidName, kind, name, c, i)
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// Root returns "/<prefix>/<table>/", the prefix of every key of the table.
func (k Keys) Root() string { return "/" + k.Prefix + "/" + k.Table + "/" }

// Shard returns "/<prefix>/<table>/shards/<shard>/".
func (k Keys) Shard(shard string) string { return k.Root() + "shards/" + shard + "/" }

// Epoch returns the shard's epoch counter key.
func (k Keys) Epoch(shard string) string { return k.Shard(shard) + "epoch" }

// Owner returns the shard's owner key.
func (k Keys) Owner(shard string) string { return k.Shard(shard) + "owner" }

// Manifest returns the shard's manifest key.
func (k Keys) Manifest(shard string) string { return k.Shard(shard) + "manifest" }
