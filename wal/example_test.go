package wal_test

import (
	"fmt"
	"log"
	"os"

	"github.com/rollwal/rollwal/vfs"
	"github.com/rollwal/rollwal/wal"
)

// ExampleOpen appends two records as the writer of epoch 1, then reads them
// back as its successor, epoch 2, does when it takes the shard over: Open
// finds the tail, and Replay returns the records of a range of positions
// (the engine asks for those after its replay cursor, which no generation
// covers yet).
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "rollwal-wal-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer vfs.Default.RemoveAll(dir)

	w, err := wal.Open(wal.Options{Dir: dir, Epoch: 1})
	if err != nil {
		log.Fatal(err)
	}
	// A record covers as many positions as the rows it carries; the payload
	// is opaque to the WAL (the engine stores an encoded batch).
	if _, err := w.Append(1, 2, []byte("rows r1, r2")); err != nil {
		log.Fatal(err)
	}
	first, err := w.Append(1, 1, []byte("row r3"))
	if err != nil {
		log.Fatal(err)
	}
	// Append only queues; SyncTo waits for the group fsync that makes
	// every record up to the position durable. Only then acknowledge.
	if err := w.SyncTo(first); err != nil {
		log.Fatal(err)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	w, err = wal.Open(wal.Options{Dir: dir, Epoch: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	fmt.Println("tail:", w.Tail())
	err = w.Replay(0, w.Tail(), func(h wal.Header, payload []byte) error {
		fmt.Printf("epoch %d, generation %d, positions %d-%d: %s\n",
			h.Epoch, h.Generation, h.FirstPos, h.FirstPos+uint64(h.Count)-1, payload)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// tail: 3
	// epoch 1, generation 1, positions 1-2: rows r1, r2
	// epoch 1, generation 1, positions 3-3: row r3
}
