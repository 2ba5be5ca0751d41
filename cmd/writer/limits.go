package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/rollwal/rollwal/engine"
)

// LimitsConfig is the limits: section: what a shard tracks for producers
// and how far it lets merges fall behind, each bounded so that nothing a
// producer sends grows memory or an etcd value without end.
type LimitsConfig struct {
	// ProducerExpiry is how long a producer session's state outlives its
	// last append.
	ProducerExpiry time.Duration `yaml:"producer_expiry"`
	// MaxProducers bounds the producer sessions per shard.
	MaxProducers int `yaml:"max_producers"`
	// MaxSources bounds the snapshot sources per shard.
	MaxSources int `yaml:"max_sources"`
	// MaxUnmergedGenerations bounds the generations a shard's manifest
	// holds before a merge drains them; appends get 429 merges_behind.
	MaxUnmergedGenerations int `yaml:"max_unmerged_generations"`
}

func defaultLimits() LimitsConfig {
	return LimitsConfig{
		ProducerExpiry: engine.DefaultProducerExpiry, MaxProducers: engine.DefaultMaxProducers,
		MaxSources: engine.DefaultMaxSources, MaxUnmergedGenerations: engine.DefaultMaxUnmergedGenerations,
	}
}

var limitSettings = []setting{
	{"limits.producer_expiry", "producer-expiry", func(d, s *Config) { d.Limits.ProducerExpiry = s.Limits.ProducerExpiry }},
	{"limits.max_producers", "max-producers", func(d, s *Config) { d.Limits.MaxProducers = s.Limits.MaxProducers }},
	{"limits.max_sources", "max-sources", func(d, s *Config) { d.Limits.MaxSources = s.Limits.MaxSources }},
	{"limits.max_unmerged_generations", "max-unmerged-generations", func(d, s *Config) {
		d.Limits.MaxUnmergedGenerations = s.Limits.MaxUnmergedGenerations
	}},
}

func addLimitFlags(f *pflag.FlagSet, l *LimitsConfig) {
	def := defaultLimits()
	f.DurationVar(&l.ProducerExpiry, "producer-expiry", def.ProducerExpiry, "forget a producer session idle this long")
	f.IntVar(&l.MaxProducers, "max-producers", def.MaxProducers, "producer sessions a shard tracks at most")
	f.IntVar(&l.MaxSources, "max-sources", def.MaxSources, "snapshot sources a shard tracks at most")
	f.IntVar(&l.MaxUnmergedGenerations, "max-unmerged-generations", def.MaxUnmergedGenerations,
		"generations a shard holds unmerged before appends get 429 merges_behind")
}

// validate checks each limit exactly as the engine would at serve.
func (l LimitsConfig) validate() error {
	switch {
	case l.ProducerExpiry <= 0:
		return badValue("limits.producer_expiry", l.ProducerExpiry, "must be positive")
	case l.MaxProducers <= 0 || l.MaxProducers > 1_000_000:
		return badValue("limits.max_producers", l.MaxProducers, "must be in 1..1000000")
	case l.MaxSources <= 0 || l.MaxSources > 4096:
		return badValue("limits.max_sources", l.MaxSources, "must be in 1..4096 (the sources' offsets live in the shard manifest, one etcd value)")
	case l.MaxUnmergedGenerations <= 0 || l.MaxUnmergedGenerations > 5000:
		return badValue("limits.max_unmerged_generations", l.MaxUnmergedGenerations, "must be in 1..5000 (the manifest must fit one etcd value)")
	}
	return nil
}

// apply sets the limits on the engine's options.
func (l LimitsConfig) apply(o *engine.Options) {
	o.ProducerExpiry, o.MaxProducers, o.MaxSources, o.MaxUnmergedGenerations = l.ProducerExpiry, l.MaxProducers, l.MaxSources, l.MaxUnmergedGenerations
}

func init() { settings = append(settings, limitSettings...) }
