package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The real-process tests of `writer serve` (kill, restart, failover,
// graceful shutdown) and their helpers are in process_test.go.

func TestServeRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "a,a"}, `"a" named twice`},
		{[]string{"--flush-bytes", "0"}, "--flush-bytes 0"},
		{[]string{"--shutdown-timeout", "0s"}, "--shutdown-timeout"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--listen", "not-an-address"}, "--listen"},
		{[]string{"--unready-delay", "-1s"}, "--unready-delay"},
		{[]string{"--max-conns", "1"}, "--max-conns 1"},
		{[]string{"--max-inflight-bytes", "1000"}, "--max-inflight-bytes 1000"},
	} {
		root := &cobra.Command{Use: "writer", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(newServe())
		root.SetArgs(append([]string{"serve", "--data-dir", t.TempDir()}, tc.args...))
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: error %v, want one naming %q", tc.args, err, tc.want)
		}
	}
}
