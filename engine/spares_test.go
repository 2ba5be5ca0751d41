package engine

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollwal/rollwal/etcdembed/etcdtest"
	"github.com/rollwal/rollwal/vfs"
)

// A shard keeps drained WAL segments as spares (Options.WALSpares) and
// writes its next segments over them; with WALSpares negative it keeps
// none. Either way every acknowledged row is committed once, through a
// reopen.
func TestWALSparesOption(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spares int
	}{{"default", 0}, {"none", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewStrictMem()
			opts := testOptions(fs, etcdtest.Name(t, "", 100))
			opts.WALSpares = tc.spares
			h := openHost(t, opts)
			s := mustOpen(t, h, "s0")
			ctx := context.Background()
			for i := range 12 {
				if _, err := s.Append(ctx, rows("r", i*200, 200), Source{}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			spares := walFiles(t, fs, opts, ".spare")
			switch {
			case tc.spares < 0 && len(spares) > 0:
				t.Fatalf("WALSpares %d, but the WAL keeps spares %v", tc.spares, spares)
			case tc.spares == 0 && len(spares) == 0:
				t.Fatal("no spare kept after a dozen drained segments")
			}
			if err := h.Close(ctx); err != nil {
				t.Fatal(err)
			}
			h = openHost(t, opts)
			defer h.Close(ctx)
			mustOpen(t, h, "s0")
			ids, _ := committed(t, fs, opts, "s0")
			if len(ids) != 12*200 {
				t.Fatalf("%d rows committed, want %d", len(ids), 12*200)
			}
			for id, n := range ids {
				if n != 1 {
					t.Fatalf("row %s committed %d times", id, n)
				}
			}
		})
	}
}

// walFiles lists the shard s0's WAL files whose names end in suffix.
func walFiles(t *testing.T, fs vfs.FS, opts Options, suffix string) []string {
	t.Helper()
	names, err := fs.List(filepath.Join(opts.DataDir, opts.Table, "shards", "s0", "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, suffix) {
			out = append(out, n)
		}
	}
	return out
}
