package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maintenanceTimeout bounds one pass (a defragment of a large database
// included; etcd's own defrag timeout is of the same order).
const maintenanceTimeout = 2 * time.Minute

// Stats is what the last maintenance pass saw.
type Stats struct {
	DBBytes      int64 `json:"db_bytes"`        // the backend file's size
	DBInUseBytes int64 `json:"db_in_use_bytes"` // its logically used part
	QuotaBytes   int64 `json:"quota_bytes"`
	Revision     int64 `json:"revision"` // the head revision
	// CompactRevision is the revision this server last compacted to (0
	// before its first compaction since Start).
	CompactRevision int64     `json:"compact_revision"`
	Compactions     uint64    `json:"compactions"`
	Defrags         uint64    `json:"defrags"`
	NoSpaceAlarm    bool      `json:"nospace_alarm"`
	Checked         time.Time `json:"checked"`
}

// maintenance is the state of the loop and of Maintain.
type maintenance struct {
	mu      sync.Mutex // one pass at a time
	statsMu sync.Mutex // guards stats, never held across a call to etcd
	stats   Stats
	cancel  context.CancelFunc
	done    chan struct{}
}

func (s *Server) startMaintenance() {
	ctx, cancel := context.WithCancel(context.Background())
	s.maint.cancel, s.maint.done = cancel, make(chan struct{})
	go s.maintainEvery(ctx, s.opts.MaintenanceInterval)
}

// stopMaintenance stops the loop and waits for it; a pass in flight is
// canceled. Safe when the loop never started.
func (s *Server) stopMaintenance() {
	if s.maint.cancel == nil {
		return
	}
	s.maint.cancel()
	<-s.maint.done
}

func (s *Server) maintainEvery(ctx context.Context, every time.Duration) {
	defer close(s.maint.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := s.Maintain(ctx); err != nil && ctx.Err() == nil && s.opts.Logger != nil {
			s.opts.Logger.Warn("embedded etcd maintenance", "dir", s.opts.Dir, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Maintain runs one maintenance pass now and returns what it saw at its
// end:
//
//  1. compact to head − CompactionRetention, waiting for the physical
//     compaction (skipped when retention is negative or nothing is new);
//  2. defragment when the database is at least DefragFloorBytes and a
//     quarter or more of it is free (bbolt counts pages a compaction left
//     half full as in use, so "half free" is rarely reached), or whenever a NOSPACE alarm is raised
//     (only a defragment shrinks the file that the quota measures);
//  3. disarm a NOSPACE alarm once the database is back under 90% of the
//     quota, so writes resume without an operator.
//
// The loop calls it every MaintenanceInterval; tests may call it directly.
func (s *Server) Maintain(ctx context.Context) (Stats, error) {
	s.maint.mu.Lock()
	defer s.maint.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, maintenanceTimeout)
	defer cancel()
	st := s.Stats()
	err := s.maintain(ctx, &st)
	s.maint.statsMu.Lock()
	s.maint.stats = st
	s.maint.statsMu.Unlock()
	s.metrics.update(st)
	if err != nil {
		s.metrics.errors.Inc()
	}
	return st, err
}

func (s *Server) maintain(ctx context.Context, st *Stats) error {
	if err := s.status(ctx, st); err != nil {
		return err
	}
	compacted, err := s.compact(ctx, st)
	if err != nil {
		return err
	}
	alarm, err := s.noSpace(ctx)
	if err != nil {
		return err
	}
	st.NoSpaceAlarm = alarm != nil
	if compacted || alarm != nil {
		if err := s.status(ctx, st); err != nil {
			return err
		}
	}
	if alarm != nil || st.DBBytes >= s.opts.DefragFloorBytes && st.DBInUseBytes <= st.DBBytes/4*3 {
		if err := s.defragment(ctx, st); err != nil {
			return err
		}
	}
	if alarm != nil && st.DBBytes < st.QuotaBytes/10*9 {
		if _, err := s.cli.AlarmDisarm(ctx, (*clientv3.AlarmMember)(alarm)); err != nil {
			return fmt.Errorf("etcdembed: disarm the NOSPACE alarm: %w", err)
		}
		st.NoSpaceAlarm = false
		if s.opts.Logger != nil {
			s.opts.Logger.Warn("embedded etcd: disarmed the NOSPACE alarm after compaction and defragmentation",
				"db_bytes", st.DBBytes, "quota_bytes", st.QuotaBytes)
		}
	}
	return nil
}

func (s *Server) status(ctx context.Context, st *Stats) error {
	resp, err := s.cli.Status(ctx, s.endpoints[0])
	if err != nil {
		return fmt.Errorf("etcdembed: status: %w", err)
	}
	st.DBBytes, st.DBInUseBytes, st.QuotaBytes = resp.DbSize, resp.DbSizeInUse, resp.DbSizeQuota
	if st.QuotaBytes == 0 { // a server that does not report it
		st.QuotaBytes = s.opts.QuotaBytes
	}
	st.Revision, st.Checked = resp.Header.Revision, time.Now()
	return nil
}

// compact compacts to head − retention when that is past the last
// compaction. A compaction etcd's own compactor made first counts as done.
func (s *Server) compact(ctx context.Context, st *Stats) (bool, error) {
	target := st.Revision - s.opts.CompactionRetention
	if s.opts.CompactionRetention < 0 || target <= st.CompactRevision || target <= 1 {
		return false, nil
	}
	_, err := s.cli.Compact(ctx, target, clientv3.WithCompactPhysical())
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return false, fmt.Errorf("etcdembed: compact to revision %d: %w", target, err)
	}
	st.CompactRevision = target
	st.Compactions++
	return true, nil
}

func (s *Server) defragment(ctx context.Context, st *Stats) error {
	before := st.DBBytes
	if _, err := s.cli.Defragment(ctx, s.endpoints[0]); err != nil {
		return fmt.Errorf("etcdembed: defragment (%d bytes, %d in use): %w", st.DBBytes, st.DBInUseBytes, err)
	}
	st.Defrags++
	if err := s.status(ctx, st); err != nil {
		return err
	}
	if s.opts.Logger != nil {
		s.opts.Logger.Info("embedded etcd defragmented", "dir", s.opts.Dir,
			"db_bytes_before", before, "db_bytes", st.DBBytes, "db_in_use_bytes", st.DBInUseBytes)
	}
	return nil
}

// noSpace returns the member's NOSPACE alarm, nil when none is raised.
func (s *Server) noSpace(ctx context.Context) (*pb.AlarmMember, error) {
	resp, err := s.cli.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: list alarms: %w", err)
	}
	for _, a := range resp.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			return a, nil
		}
	}
	return nil, nil
}

// Stats returns what the last maintenance pass saw (the first runs at
// Start).
func (s *Server) Stats() Stats {
	s.maint.statsMu.Lock()
	defer s.maint.statsMu.Unlock()
	return s.maint.stats
}
