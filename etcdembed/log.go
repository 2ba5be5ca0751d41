package etcdembed

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newZap returns the zap logger handed to etcd: a no-op for a nil slog
// logger, otherwise a core that forwards error-level entries to l while mute
// is false.
func newZap(l *slog.Logger, mute *atomic.Bool) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return zap.New(&slogCore{l: l, mute: mute})
}

// slogCore is a zapcore.Core writing to an *slog.Logger. Only entries at
// zapcore.ErrorLevel and above pass: etcd logs warnings on every single-node
// start (single-port serving, simple auth tokens) that are noise for us.
type slogCore struct {
	l      *slog.Logger
	mute   *atomic.Bool
	fields []zapcore.Field
}

func (c *slogCore) Enabled(lvl zapcore.Level) bool {
	return lvl >= zapcore.ErrorLevel && !c.mute.Load()
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{l: c.l, mute: c.mute, fields: append(slices.Clip(c.fields), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	if benign(e.Message, enc.Fields) {
		return nil
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	attrs = append(attrs, slog.String("component", "etcd"))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	c.l.LogAttrs(context.Background(), slog.LevelError, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// benign reports error-level entries that etcd 3.7 logs in normal operation.
// A freshly bootstrapped member's version monitor can run before the first
// raft entry is applied and fail with "missing term information"; it retries
// on its next tick and succeeds.
func benign(msg string, fields map[string]any) bool {
	if msg != "failed to update storage version" {
		return false
	}
	err, _ := fields["error"].(string)
	return strings.Contains(err, "missing term information")
}
