package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/rollwal/rollwal/client"
	"github.com/rollwal/rollwal/engine"
	"github.com/rollwal/rollwal/etcdembed"
	"github.com/rollwal/rollwal/server"
	"github.com/rollwal/rollwal/vfs"
)

// ExampleClient_Append sends one batch to the shard "default" of a writer.
// The answer comes once the writer made the rows durable; retries of lost
// answers are the Client's, and its producer session keeps them from
// storing a row twice.
func ExampleClient_Append() {
	ctx := context.Background()
	url, stop := startWriter(ctx)
	defer stop()

	c, err := client.New(url, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Append(ctx, "default", []map[string]any{
		{"id": "r1", "prompt": "2+2?", "completion": "4", "reward": 1.0},
		{"id": "r2", "prompt": "3+3?", "completion": "7", "reward": 0.0, "metadata": map[string]any{"model": "m1"}},
	}, &client.Source{Name: "rollouts-queue", Offset: 41})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored", res.Stored, "duplicates", res.Duplicates)
	fmt.Println("session sequence of the first row:", res.SessionSeq)
	// Output:
	// stored 2 duplicates 0
	// session sequence of the first row: 0
}

// ExampleBatcher sends a stream of single rows in batches: the writer pays
// one fsync per request, so a row is stored with others, and its Ack says
// when its batch is durable.
func ExampleBatcher() {
	ctx := context.Background()
	url, stop := startWriter(ctx)
	defer stop()

	c, err := client.New(url, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// A batch goes when it holds MaxRows rows, or when its first row has
	// waited Linger (long here, so that the batches are the same on every
	// run).
	b := c.NewBatcher(client.BatcherOptions{MaxRows: 100, Linger: time.Minute})
	var acks []*client.Ack
	for i := range 250 {
		row := map[string]any{"id": fmt.Sprint("r", i), "prompt": "p", "completion": "c"}
		ack, err := b.Add(ctx, "default", row, nil)
		if err != nil {
			log.Fatal(err)
		}
		acks = append(acks, ack)
	}
	// Close sends the last, partial batch and waits for every answer.
	if err := b.Close(ctx); err != nil {
		log.Fatal(err)
	}
	batches := map[*client.Ack]bool{}
	stored := 0
	for _, ack := range acks {
		if batches[ack] {
			continue
		}
		batches[ack] = true
		res, err := ack.Wait(ctx)
		if err != nil {
			log.Fatal(err)
		}
		stored += res.Stored
	}
	fmt.Println("stored", stored, "rows in", len(batches), "batches")
	// Output:
	// stored 250 rows in 3 batches
}

// startWriter runs what `writer serve` runs, in this process: an embedded
// etcd, an engine host with the shard "default" of the table "rollouts",
// and the HTTP server in front of it. stop shuts it all down.
func startWriter(ctx context.Context) (url string, stop func()) {
	dir, err := os.MkdirTemp("", "rollwal-example-")
	if err != nil {
		log.Fatal(err)
	}
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		log.Fatal(err)
	}
	host, err := engine.NewHost(engine.Options{DataDir: dir, Etcd: etcd.Client(), FlushAge: -1})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := host.Open(ctx, "default"); err != nil {
		log.Fatal(err)
	}
	srv := server.New(server.Options{Host: host, Shards: []string{"default"}})
	srv.SetReady(true)
	ts := httptest.NewServer(srv)
	return ts.URL, func() {
		ts.Close()
		if err := host.Close(ctx); err != nil {
			log.Fatal(err)
		}
		etcd.Close()
		vfs.Default.RemoveAll(dir)
	}
}
