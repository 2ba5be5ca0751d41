package catalog

import (
	"strings"
	"testing"

	"github.com/rollwal/rollwal/vfs"
)

// Every directory whose sync fails is named in the error, each in its own
// slot: the syncs run at once, and none may write another's (or past the
// end of the list).
func TestSyncDirtyReportsEveryFailedDirectory(t *testing.T) {
	io := newFileIO(vfs.NewStrictMem())
	dirs := []string{"/missing/a", "/missing/b", "/missing/c", "/missing/d"}
	for _, d := range dirs {
		io.dirty.dirs[d] = true
	}
	err := io.syncDirty()
	if err == nil {
		t.Fatal("syncing directories that do not exist succeeded")
	}
	for _, d := range dirs {
		if !strings.Contains(err.Error(), d) {
			t.Errorf("the error does not name %s: %v", d, err)
		}
		if !io.dirty.dirs[d] {
			t.Errorf("%s is no longer dirty after its sync failed", d)
		}
	}
}
