// Package soak runs the real writer process under abuse for a while and
// then checks the base table exactly: `writer serve` with producer
// sessions that retry, `writer merge --every`, periodic SIGKILL (and now
// and then SIGTERM) and restart of the serve, slow clients and oversized
// or malformed requests. It samples the serve's resident memory, open
// descriptors, disk use and etcd database size over the run, and fails on
// anything the writer promises against: an acknowledged id missing from
// the base, an id twice, an id never sent, a 5xx for a bad request, a merge
// job that gave up, or a serve that does not come back.
//
// scripts/soak is its command line (internal/cmd/soak).
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/rollwal/rollwal/layout"
)

// Config of a soak run.
type Config struct {
	// Writer is the path of the writer binary (required).
	Writer string
	// Dir is the data directory; created, and must be empty.
	Dir string
	// Duration is how long producers run before the final check.
	Duration time.Duration
	// Shards the serve hosts; default s0…s3.
	Shards []string
	// Producers is the number of concurrent producer sessions; default 8.
	Producers int
	// BatchRows is the rows of one append; default 200.
	BatchRows int
	// Rate is the producers' total rows per second at most; default 2000,
	// negative unpaced.
	Rate int
	// KillEvery is the interval between stops of the serve (the second of
	// every four a SIGTERM, the others SIGKILL); default 30 s; negative never.
	KillEvery time.Duration
	// MergeEvery is the --every of the merge job; default 3 s.
	MergeEvery time.Duration
	// SlowClients is how many slow connections are kept open; default 64.
	SlowClients int
	// SampleEvery is the interval of the resource samples; default 2 s.
	SampleEvery time.Duration
	// MaxBodyBytes is the serve's --max-body-bytes; the oversized requests
	// are one byte more. Default 4 MiB.
	MaxBodyBytes int64
	// Log receives progress lines; default discards.
	Log io.Writer
}

func (c *Config) defaults() {
	if len(c.Shards) == 0 {
		c.Shards = []string{"s0", "s1", "s2", "s3"}
	}
	setDefault(&c.Producers, 8)
	setDefault(&c.BatchRows, 200)
	setDefault(&c.Rate, 2000)
	setDefault(&c.KillEvery, 30*time.Second)
	setDefault(&c.MergeEvery, 3*time.Second)
	setDefault(&c.SlowClients, 64)
	setDefault(&c.SampleEvery, 2*time.Second)
	setDefault(&c.MaxBodyBytes, 4<<20)
	if c.Log == nil {
		c.Log = io.Discard
	}
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

func (c *Config) validate() error {
	switch {
	case c.Writer == "":
		return errors.New("soak: Config.Writer (the writer binary) is required")
	case c.Dir == "":
		return errors.New("soak: Config.Dir (the data directory) is required")
	case c.Duration <= 0:
		return fmt.Errorf("soak: duration %v: must be positive", c.Duration)
	case c.Producers < 1 || c.BatchRows < 1 || c.SlowClients < 0:
		return fmt.Errorf("soak: producers %d, batch rows %d, slow clients %d: out of range", c.Producers, c.BatchRows, c.SlowClients)
	}
	if _, err := os.Stat(c.Writer); err != nil {
		return fmt.Errorf("soak: writer binary: %w", err)
	}
	if names, err := os.ReadDir(c.Dir); err == nil && len(names) > 0 {
		return fmt.Errorf("soak: data directory %s is not empty", c.Dir)
	}
	return nil
}

// Run runs the soak and returns its report; the error lists every broken
// promise (the report is filled as far as the run got).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, addr: "127.0.0.1:" + strconv.Itoa(port), rep: &Report{Started: time.Now()}, led: newLedger(cfg.Producers)}
	err = r.run(ctx)
	r.rep.Took = time.Since(r.rep.Started)
	return r.rep, err
}

// run is the state of one soak.
type run struct {
	cfg  Config
	addr string // the serve's fixed listen address, kept across restarts
	rep  *Report
	led  *ledger

	mu    sync.Mutex
	serve *proc // the serve of the moment; nil while it is down
	fails []string
}

// fail records a broken promise; the run goes on and reports them all.
func (r *run) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fails) < 50 {
		r.fails = append(r.fails, msg)
	}
	fmt.Fprintln(r.cfg.Log, "soak: FAIL:", msg)
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "soak: %s %s\n", time.Since(r.rep.Started).Round(time.Second), fmt.Sprintf(format, args...))
}

func (r *run) failures() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fails) == 0 {
		return nil
	}
	errs := make([]error, len(r.fails))
	for i, f := range r.fails {
		errs[i] = errors.New(f)
	}
	return fmt.Errorf("soak: %d broken promises: %w", len(r.fails), errors.Join(errs...))
}

func (r *run) run(ctx context.Context) error {
	if err := r.startServe(ctx); err != nil {
		return err
	}
	merge, err := r.startMerge()
	if err != nil {
		r.stopServe(syscallTERM)
		return err
	}
	work, stop := context.WithTimeout(ctx, r.cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	for i := range r.cfg.Producers {
		wg.Add(1)
		go func() { defer wg.Done(); r.produce(work, i) }()
	}
	for _, f := range []func(context.Context){r.killLoop, r.sampleLoop, r.slowClients, r.badRequests} {
		wg.Add(1)
		go func() { defer wg.Done(); f(work) }()
	}
	wg.Wait()
	r.logf("producers stopped: %d batches acknowledged", r.led.ackedBatches())
	r.finish(ctx, merge)
	return r.failures()
}

// finish stops the merge job, flushes and stops the serve gracefully,
// publishes what is left with one merge pass and checks the base.
func (r *run) finish(ctx context.Context, merge *proc) {
	if merge.exited() {
		r.fail("merge --every exited during the run: %v\n%s", merge.err(), merge.tail(20))
	}
	merge.stop(syscallTERM, time.Minute)
	r.rep.Merges = merge.countLines(`"generations":`)
	if err := r.ensureServe(ctx); err != nil {
		r.fail("serve for the final flush: %v", err)
		return
	}
	r.sample() // the last figures, with the serve still up
	if err := r.stopServe(syscallTERM); err != nil {
		r.fail("final graceful stop of serve: %v", err)
	}
	if out, err := r.writer(ctx, "merge", "--data-dir", r.cfg.Dir, "-o", "json"); err != nil {
		r.fail("final merge: %v\n%s", err, out)
		return
	}
	if err := r.checkBase(); err != nil {
		r.fail("%v", err)
	}
}

// freePort asks the kernel for a port nobody listens on; the serve binds
// it (a collision with another process fails its start, which is seen).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (r *run) baseDir() string { return layout.BaseDir(r.cfg.Dir, "rollouts") }
