package catalog

import (
	"fmt"
	"strings"

	"github.com/apache/iceberg-go/table"
)

// MaxNameLen bounds a namespace or table name.
const MaxNameLen = 128

// keys names the catalog's etcd keys under one prefix:
//
//	/<prefix>/namespaces/<ns>          namespace properties, JSON object
//	/<prefix>/tables/<ns>/<table>      the table's record (see record)
//
// Namespaces have one level. Names are 1 to 128 bytes of [A-Za-z0-9._-],
// neither "." nor "..", so no name contains "/" and a key splits uniquely.
type keys struct{ prefix string }

func (k keys) namespaces() string         { return "/" + k.prefix + "/namespaces/" }
func (k keys) namespace(ns string) string { return k.namespaces() + ns }
func (k keys) tables(ns string) string    { return "/" + k.prefix + "/tables/" + ns + "/" }
func (k keys) table(ns, t string) string  { return k.tables(ns) + t }

// validPrefix checks a prefix: names joined by "/", no leading or trailing
// "/".
func validPrefix(p string) error {
	if p == "" {
		return fmt.Errorf("%w: prefix is empty", ErrInvalidName)
	}
	for _, seg := range strings.Split(p, "/") {
		if err := validName("prefix segment", seg); err != nil {
			return fmt.Errorf("%w (prefix %q)", err, p)
		}
	}
	return nil
}

func validName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s name is empty", ErrInvalidName, kind)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %s name is %d bytes, more than %d", ErrInvalidName, kind, len(name), MaxNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %s name %q is reserved", ErrInvalidName, kind, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isNameByte(c) {
			return fmt.Errorf("%w: %s name %q has %q at byte %d; allowed are A-Z a-z 0-9 . _ -", ErrInvalidName, kind, name, c, i)
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// splitNamespace checks a one-level namespace identifier.
func splitNamespace(ns table.Identifier) (string, error) {
	if len(ns) != 1 {
		return "", fmt.Errorf("%w: namespace %q: this catalog has one namespace level", ErrInvalidName, ns)
	}
	return ns[0], validName("namespace", ns[0])
}

// splitTable checks a table identifier (namespace, table).
func splitTable(ident table.Identifier) (ns, name string, err error) {
	if len(ident) != 2 {
		return "", "", fmt.Errorf("%w: table identifier %q: want namespace and table", ErrInvalidName, ident)
	}
	if err := validName("namespace", ident[0]); err != nil {
		return "", "", err
	}
	return ident[0], ident[1], validName("table", ident[1])
}
