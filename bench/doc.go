// Package bench holds the end-to-end benchmarks of rollwal: the paths that
// cross packages (append → WAL → memtable → flush → manifest commit), with
// their figures reported as ratios against stages measured in the same run
// (see docs/benchmarks.md). Per-package benchmarks live beside their
// packages: BenchmarkWALAppend in wal, BenchmarkFlush in generation.
package bench
