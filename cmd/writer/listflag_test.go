package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestListFlagsRejectBadNames: a list flag keeps every byte it is given,
// so a shard name that is not one fails serve naming the flag and the
// value, before anything starts: pflag's StringSlice read the value as one
// CSV record and silently cut --shards 'a\nb' to [a]. Control characters
// are refused by every list flag (shards, etcd endpoints, Cassandra hosts).
func TestListFlagsRejectBadNames(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--shards", "a\nb"}, `invalid argument "a\nb" for "--shards" flag: "a\nb" has the control character '\n' at byte 1`},
		{[]string{"serve", "--shards", "a", "--shards", "b\rc"}, `invalid argument "b\rc" for "--shards" flag`},
		{[]string{"serve", "--shards", "a,b c"}, `--shards [a "b c"]: shardmeta: invalid name: shard name "b c" has ' ' at byte 1`},
		{[]string{"serve", "--shards", "a,,b"}, `--shards [a "" b]: shardmeta: invalid name: shard name is empty`},
		{[]string{"serve", "--shards", "a/b"}, `--shards [a/b]: shardmeta: invalid name: shard name "a/b" has '/' at byte 1`},
		{[]string{"serve", "--etcd-endpoints", "http://127.0.0.1:2379\nhttp://127.0.0.1:2380"}, `invalid argument "http://127.0.0.1:2379\nhttp://127.0.0.1:2380" for "--etcd-endpoints" flag`},
		{[]string{"serve", "--cassandra-hosts", "c1\nc2"}, `invalid argument "c1\nc2" for "--cassandra-hosts" flag`},
		{[]string{"snapshot", "create-schema", "--print", "--hosts", "c1\tc2"}, `invalid argument "c1\tc2" for "--hosts" flag`},
	} {
		data := filepath.Join(t.TempDir(), "data")
		args := tc.args
		if args[0] == "serve" {
			// A setting checked after the shards: a list cut short fails
			// on it rather than start a serve.
			args = append(args, "--data-dir", data, "--shutdown-timeout", "0s")
		}
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error holding %q", tc.args, err, tc.want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("%q created the data dir before refusing: %v", tc.args, err)
		}
	}
}

// TestListFlagKeepsPflagsSemantics: the default until set, commas split,
// repeated flags add up, and --help shows the default as pflag did.
func TestListFlagKeepsPflagsSemantics(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"default"}},
		{[]string{"--shards", "a,b"}, []string{"a", "b"}},
		{[]string{"--shards", "a", "--shards", "b,c"}, []string{"a", "b", "c"}},
	} {
		var got []string
		f := pflag.NewFlagSet("x", pflag.ContinueOnError)
		listVar(f, &got, "shards", []string{"default"}, "")
		if err := f.Parse(tc.args); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
	if help := fmt.Sprint(newServe().Flags().FlagUsages()); !strings.Contains(help, "--shards strings") ||
		!strings.Contains(help, "(default [default])") || strings.Contains(help, "--etcd-endpoints strings   external etcd endpoints (default: etcd embedded under <data-dir>/etcd) (default") {
		t.Errorf("serve --help shows the list flags differently:\n%s", help)
	}
}
