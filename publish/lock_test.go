package publish

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestLockWaitSurvivesCompaction: a coordinator that finds the merge lock
// held waits for its DELETE with a watch. etcd compacts its history (the
// embedded one keeps 1,000 revisions), so the watch must not start from the
// revision the holder took the lock at, long compacted by then: it starts
// from the read and reads again when compacted. The waiter takes the lock
// once the holder closes.
func TestLockWaitSurvivesCompaction(t *testing.T) {
	e := newEnv(t)
	holder := e.coordinator()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rev int64
	for i := range 50 { // history after the lock was taken
		resp, err := etcdClient.Put(ctx, fmt.Sprintf("/lock-test/%s/%d", e.table, i), "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := etcdClient.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		c, err := New(ctx, Options{Etcd: etcdClient, Prefix: "rollwal", Table: e.table, DataDir: e.dir, FS: e.fs, LeaseTTL: 5 * time.Second})
		if err == nil {
			c.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", err)
	case <-time.After(200 * time.Millisecond): // it waits (no verdict may come before the holder goes)
	}
	holder.Close()
	if err := <-got; err != nil {
		t.Fatalf("the waiter, once the holder closed: %v", err)
	}
}
