package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/generation"
	"github.com/rollwal/rollwal/internal/s3test"
	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/publish"
	"github.com/rollwal/rollwal/server"
)

// TestServeAndMergeWithObjectStorage: `writer serve` with storage: on a
// real S3 server (versitygw), credentials from key files, uploads each
// generation it flushes to the bucket before committing it; `writer merge`
// with the same configuration publishes the table's base with every row
// exactly once. A merge from a second data directory — another machine:
// nothing copied but the configuration, the same etcd and bucket, no
// generation file of its own — publishes the other table, reading its
// generations from the bucket alone.
//
// The base (data files, Iceberg metadata) stays under the data directory
// of the merge in this increment, so each table's merges run from one
// data directory: rollouts' from the writer's, events' from the second.
func TestServeAndMergeWithObjectStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and an S3 server")
	}
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	dir := t.TempDir()
	dir1, dir2 := filepath.Join(dir, "writer"), filepath.Join(dir, "elsewhere")
	access, secret := filepath.Join(dir, "access"), filepath.Join(dir, "secret")
	writeTestFile(t, access, srv.AccessKey()+"\n")
	writeTestFile(t, secret, srv.SecretKey()+"\n")
	storage := fmt.Sprintf("storage: {url: 's3://%s/tables', endpoint: '%s', path_style: true, access_key_file: '%s', secret_key_file: '%s'}\n",
		bucket, srv.Endpoint(), access, secret)
	tables := "tables:\n  - name: rollouts\n  - name: events\n"
	cfg1 := filepath.Join(dir, "writer.yaml")
	writeTestFile(t, cfg1, "data_dir: "+dir1+"\nlisten: 127.0.0.1:0\nflush_age: -1s\nlease_ttl: 2s\n"+storage+tables)
	if out, err := run(t, "config", "check", "--config", cfg1); err != nil || !strings.Contains(out, "s3://"+bucket+"/tables") ||
		strings.Contains(out, srv.SecretKey()) {
		t.Fatalf("config check: %v\n%s", err, out)
	}

	p := startServe(t, "--config", cfg1)
	posted := map[string][]string{}
	for _, table := range []string{"rollouts", "events"} {
		for batch := range 3 { // three generations a table
			ids := batchIDs(table, batch, 50)
			postTable(t, p, table, ids)
			posted[table] = append(posted[table], ids...)
		}
	}
	// Each committed generation is an object of the bucket, under the
	// prefix, by generation.ObjectKey.
	objects := listBucket(t, srv, bucket, "tables/")
	for _, table := range []string{"rollouts", "events"} {
		st := tableShardStatus(t, p, table, "default")
		if len(st.Flushed) != 3 {
			t.Fatalf("table %s: %d generations committed; want 3: %+v", table, len(st.Flushed), st.Flushed)
		}
		for _, g := range st.Flushed {
			key := "tables/" + generation.ObjectKey(table, "default", g.File)
			if !slices.Contains(objects, key) {
				t.Errorf("table %s: generation %d is committed but %s is not in the bucket (it holds %v)", table, g.Number, key, objects)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	code, metrics := httpDo(t, http.MethodGet, p.url("/metrics"), "", "")
	wantMetric := fmt.Sprintf(`writer_objstore_requests_total{backend="s3",op="PutObject",outcome="ok",store="s3://%s/tables"}`, bucket)
	if code != http.StatusOK || !strings.Contains(string(metrics), wantMetric) {
		t.Errorf("/metrics: %d; no %s", code, wantMetric)
	}

	// The merge beside the writer, with the writer's configuration.
	rep := merge(t, "--config", cfg1, "--table", "rollouts")
	if rep.Generations != 3 || rep.Base.Rows != int64(len(posted["rollouts"])) {
		t.Fatalf("merge of rollouts: %+v; want 3 generations and %d rows", rep, len(posted["rollouts"]))
	}
	checkExactlyOnce(t, "rollouts", readStoreBase(t, srv, bucket, "rollouts"), posted["rollouts"])

	// The merge from another data directory: the writer's embedded etcd
	// (as a cluster elsewhere would be), the same bucket, nothing else.
	var rec recorded
	if rec = readEndpoint(dir1); !rec.found || len(rec.rec.Endpoints) == 0 {
		t.Fatalf("no etcd endpoint recorded by serve in %s: %+v", dir1, rec)
	}
	cfg2 := filepath.Join(dir, "elsewhere.yaml")
	writeTestFile(t, cfg2, fmt.Sprintf("data_dir: %s\netcd: {endpoints: [%s]}\n%s%s", dir2, strings.Join(rec.rec.Endpoints, ", "), storage, tables))
	rep = merge(t, "--config", cfg2, "--table", "events")
	if rep.Generations != 3 || rep.Base.Rows != int64(len(posted["events"])) {
		t.Fatalf("merge of events from %s: %+v; want 3 generations and %d rows", dir2, rep, len(posted["events"]))
	}
	checkExactlyOnce(t, "events", readStoreBase(t, srv, bucket, "events"), posted["events"])
	if _, err := os.Stat(filepath.Join(dir2, "events", "shards")); !os.IsNotExist(err) {
		t.Errorf("the second data directory has shard files (%v): its merge must have read the generations from the bucket", err)
	}
	for _, d := range []string{dir1, dir2} {
		if _, err := os.Stat(filepath.Join(d, "events", "base")); !os.IsNotExist(err) {
			t.Errorf("%s has a local base of events (%v): the base lives in the bucket", d, err)
		}
	}

	// More rows after the merges; a merge of both tables, each from its
	// directory, publishes only the new ones.
	more := batchIDs("rollouts-late", 0, 20)
	postTable(t, p, "rollouts", more)
	posted["rollouts"] = append(posted["rollouts"], more...)
	more = batchIDs("events-late", 0, 20)
	postTable(t, p, "events", more)
	posted["events"] = append(posted["events"], more...)
	// Those flushes drained the merged generations: their objects went
	// with their files, and the bucket holds the new generation alone.
	for _, table := range []string{"rollouts", "events"} {
		st := tableShardStatus(t, p, table, "default")
		want := []string{}
		for _, g := range st.Flushed {
			want = append(want, "tables/"+generation.ObjectKey(table, "default", g.File))
		}
		var got []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if got = listBucket(t, srv, bucket, "tables/"+table+"/shards/"); slices.Equal(got, want) || time.Now().After(deadline) {
				break
			}
		}
		if len(want) != 1 || !slices.Equal(got, want) {
			t.Errorf("table %s after the drain: the bucket holds %v; the manifest names %v (want the one new generation)", table, got, want)
		}
	}
	p.signal(t, syscall.SIGTERM)
	if err := p.wait(t, time.Minute); err != nil {
		t.Fatalf("serve: %v", err)
	}
	// Serve is gone, and its embedded etcd with it: the second directory's
	// merge now needs an etcd of its own to reach, so the writer's
	// directory merges rollouts, and a serve restarted for etcd lets the
	// other merge events.
	if rep = merge(t, "--config", cfg1, "--table", "rollouts"); rep.Generations != 1 {
		t.Errorf("second merge of rollouts: %+v; want the one new generation", rep)
	}
	checkExactlyOnce(t, "rollouts", readStoreBase(t, srv, bucket, "rollouts"), posted["rollouts"])
	p = startServe(t, "--config", cfg1)
	rec = readEndpoint(dir1)
	writeTestFile(t, cfg2, fmt.Sprintf("data_dir: %s\netcd: {endpoints: [%s]}\n%s%s", dir2, strings.Join(rec.rec.Endpoints, ", "), storage, tables))
	if rep = merge(t, "--config", cfg2, "--table", "events"); rep.Generations != 1 {
		t.Errorf("second merge of events: %+v; want the one new generation", rep)
	}
	checkExactlyOnce(t, "events", readStoreBase(t, srv, bucket, "events"), posted["events"])
	p.signal(t, syscall.SIGTERM)
	if err := p.wait(t, time.Minute); err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// postTable posts ids to table's default shard and flushes it: one
// committed generation.
func postTable(t *testing.T, p *serveProc, table string, ids []string) {
	t.Helper()
	base := p.url("/v1/tables/" + table + "/shards/default")
	if code, b := httpDo(t, http.MethodPost, base+"/rows", server.ContentTypeNDJSON, ndjson(ids)); code != http.StatusOK {
		t.Fatalf("post to %s: %d %s", table, code, b)
	}
	if code, b := httpDo(t, http.MethodPost, base+"/flush", "", ""); code != http.StatusOK {
		t.Fatalf("flush %s: %d %s", table, code, b)
	}
}

func tableShardStatus(t *testing.T, p *serveProc, table, shard string) engine.Status {
	t.Helper()
	code, b := httpDo(t, http.MethodGet, p.url("/v1/tables/"+table+"/shards/"+shard), "", "")
	var st engine.Status
	if err := json.Unmarshal(b, &st); code != http.StatusOK || err != nil {
		t.Fatalf("status of %s/%s: %d %s %v", table, shard, code, b, err)
	}
	return st
}

// listBucket lists the keys under prefix.
func listBucket(t *testing.T, srv *s3test.Server, bucket, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	pages := s3.NewListObjectsV2Paginator(srv.Client(t), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatalf("list s3://%s/%s: %v", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// readStoreBase counts the ids of table's base in the bucket: its latest
// readers' manifest there, and each base file it names, read back from
// the bucket as a reader elsewhere would.
func readStoreBase(t *testing.T, srv *s3test.Server, bucket, table string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := objstore.Open(ctx, "s3://"+bucket+"/tables", objstore.Options{
		Endpoint: srv.Endpoint(), Region: srv.Region(), PathStyle: true, AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()})
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := publish.LatestStoreReaderManifest(ctx, store, table)
	if err != nil || !ok {
		t.Fatalf("readers' manifest of %s in the bucket: ok=%v err=%v", table, ok, err)
	}
	ids := map[string]int{}
	for _, f := range m.Files {
		key := table + "/base/" + f.Path
		obj, err := store.Open(ctx, key)
		if err != nil {
			t.Fatalf("base file %s: %v", key, err)
		}
		_, d, err := generation.ReadStoredFrom(obj, obj.Size(), key)
		obj.Close()
		if err != nil {
			t.Fatalf("base file %s: %v", key, err)
		}
		for _, id := range d.Rows.IDs {
			ids[id]++
		}
	}
	return ids
}

// checkExactlyOnce: the base holds each posted id once and nothing else.
func checkExactlyOnce(t *testing.T, table string, ids map[string]int, posted []string) {
	t.Helper()
	var errs []string
	for _, id := range posted {
		if n := ids[id]; n != 1 {
			errs = append(errs, fmt.Sprintf("%s %d times", id, n))
		}
	}
	if len(ids) != len(posted) {
		errs = append(errs, fmt.Sprintf("%d distinct ids in the base, %d posted", len(ids), len(posted)))
	}
	if len(errs) > 0 {
		t.Fatalf("table %s: the base breaks exactly-once: %s", table, strings.Join(errs[:min(len(errs), 10)], "; "))
	}
}
