package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/pflag"
)

// listFlag is a comma-separated list flag (shards, hosts, endpoints).
// pflag's StringSlice reads its value as one CSV record, so that
// --shards 'a\nb' silently became [a]: everything after the newline was
// dropped. This one keeps every byte, splitting on commas only, and refuses
// control characters outright; what is left is checked by the setting's own
// validation, which names the flag. Given twice, the values add up, as
// pflag's do.
type listFlag struct {
	dst *[]string
	set bool // false until the first Set: that one replaces the default
}

func listVar(f *pflag.FlagSet, dst *[]string, name string, def []string, usage string) {
	*dst = def
	f.Var(&listFlag{dst: dst}, name, usage)
}

func (l *listFlag) Set(v string) error {
	if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%q has the control character %q at byte %d: give one list, its names separated by commas", v, v[i], i)
	}
	items := strings.Split(v, ",")
	if l.set {
		items = append(*l.dst, items...)
	}
	*l.dst, l.set = items, true
	return nil
}

// Type is what pflag's own list flags say in --help.
func (l *listFlag) Type() string { return "strings" }

// String is the default in --help: none when empty, as pflag's own say.
func (l *listFlag) String() string {
	if l.dst == nil || len(*l.dst) == 0 {
		return ""
	}
	return listString(*l.dst)
}

// listString prints a list as [a b], quoting the items that would not read
// back as themselves (empty, spaces, control characters), so that an error
// shows exactly what was given.
func listString(items []string) string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = s
		if q := strconv.Quote(s); s == "" || q[1:len(q)-1] != s || strings.ContainsAny(s, " ,[]") {
			out[i] = q
		}
	}
	return "[" + strings.Join(out, " ") + "]"
}
