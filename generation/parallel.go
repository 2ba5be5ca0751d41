package generation

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"

	"github.com/rollwal/rollwal/schema"
)

// A row group's leaves are written on several goroutines. Each leaf has a
// column writer of its own (its page buffer, its compression, its
// statistics), and the leaves of a row group are independent until the
// row group is flushed, so a leaf is one task, run whole by one goroutine.
// A flush is CPU-bound on encoding and page compression, so a second core
// shortens it nearly in proportion when the leaves are balanced; long
// token lists make them uneven, so the largest go first.

// minParallelBytes is the estimated row-group size below which the leaves
// are written on the calling goroutine: small flushes gain less than the
// hand-off costs.
const minParallelBytes = 256 << 10

// parallelRowGroups counts the row groups written on several goroutines,
// and leafTaskHook, when set, runs before every leaf: both for tests.
var (
	parallelRowGroups atomic.Int64
	leafTaskHook      func() error
)

// leafTask writes one leaf's rows of a row group with an encoder.
type leafTask struct {
	cost  int // estimated bytes, to start the largest first
	write func(e *columnEncoder) error
}

// encoderPool holds an encoder (a value buffer) per worker, kept across
// row groups.
type encoderPool struct {
	pageBufferSize int
	workers        int
	encoders       []*columnEncoder
}

func newEncoderPool(pageBufferSize, workers int) *encoderPool {
	return &encoderPool{pageBufferSize: pageBufferSize, workers: max(workers, 1)}
}

func (p *encoderPool) encoder(i int) *columnEncoder {
	for len(p.encoders) <= i {
		p.encoders = append(p.encoders, newColumnEncoder(p.pageBufferSize))
	}
	return p.encoders[i]
}

// writeRowGroup writes rows [lo, hi) of every leaf.
func (p *encoderPool) writeRowGroup(ctx context.Context, cw []*parquet.ColumnWriter, lay *layout, s *schema.Schema, d Data, lo, hi int) error {
	tasks := rowGroupTasks(cw, lay, s, d, lo, hi)
	total := 0
	for _, t := range tasks {
		total += t.cost
	}
	workers := min(p.workers, len(tasks))
	if workers <= 1 || total < minParallelBytes {
		return p.runSerial(ctx, tasks)
	}
	slices.SortStableFunc(tasks, func(a, b leafTask) int { return cmp.Compare(b.cost, a.cost) })
	parallelRowGroups.Add(1)
	return p.runParallel(ctx, tasks, workers)
}

func (t *leafTask) run(e *columnEncoder) error {
	if leafTaskHook != nil {
		if err := leafTaskHook(); err != nil {
			return err
		}
	}
	return t.write(e)
}

func (p *encoderPool) runSerial(ctx context.Context, tasks []leafTask) error {
	e := p.encoder(0)
	for _, t := range tasks {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := t.run(e); err != nil {
			return err
		}
	}
	return nil
}

// runParallel runs the tasks on workers goroutines, each taking the next
// task when it is done with one. The first error stops every worker
// before its next task.
func (p *encoderPool) runParallel(ctx context.Context, tasks []leafTask, workers int) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		wg     sync.WaitGroup
		errs   = make([]error, workers)
	)
	for w := range workers {
		e := p.encoder(w)
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= len(tasks) {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = tasks[i].run(e)
				}
				if err != nil {
					errs[w] = err
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// rowGroupTasks lists a task per leaf for rows [lo, hi): id, the user
// columns' leaves, _seq and _epoch.
func rowGroupTasks(cw []*parquet.ColumnWriter, lay *layout, s *schema.Schema, d Data, lo, hi int) []leafTask {
	b := d.Rows
	tasks := make([]leafTask, 0, len(cw))
	tasks = append(tasks, leafTask{cost: stringBytes(b.IDs[lo:hi]), write: func(e *columnEncoder) error {
		return e.writeStrings(cw[0], 0, b.IDs, nil, false, lo, hi)
	}})
	for i, c := range s.Columns {
		v := &b.Cols[i]
		leaves := lay.nested[i]
		if leaves == nil {
			col, nullable := lay.first[i], c.Nullable
			tasks = append(tasks, leafTask{cost: valuesCost(v, lo, hi), write: func(e *columnEncoder) error {
				return e.writeVector(cw[col], col, nullable, v, lo, hi)
			}})
			continue
		}
		for l := range leaves {
			leaf := &leaves[l]
			tasks = append(tasks, leafTask{cost: leaf.cost(v, lo, hi), write: func(e *columnEncoder) error {
				return e.writeNested(cw[leaf.index], leaf, v, lo, hi)
			}})
		}
	}
	for _, col := range []struct {
		index int
		vals  []uint64
	}{{lay.seqIndex, d.Seq}, {lay.epochIndex, d.Epoch}} {
		tasks = append(tasks, leafTask{cost: 8 * (hi - lo), write: func(e *columnEncoder) error {
			return e.writeUints(cw[col.index], col.index, col.vals, lo, hi)
		}})
	}
	return tasks
}

// cost estimates the bytes of rows [lo, hi) of the leaf.
func (l *nestedLeaf) cost(v *schema.Vector, lo, hi int) int {
	_, out := l.vectors(v)
	if l.lv.list {
		lo, hi = int(v.Offsets[lo]), int(v.Offsets[hi])
	}
	return valuesCost(out, lo, hi)
}

// valuesCost estimates the bytes of values [lo, hi) of v.
func valuesCost(v *schema.Vector, lo, hi int) int {
	if pointsIntoBatch(v.Type) {
		return stringBytes(v.Str[lo:hi])
	}
	return 8 * (hi - lo)
}

func stringBytes(strs []string) int {
	n := 4 * len(strs)
	for _, s := range strs {
		n += len(s)
	}
	return n
}
