package testproc

import (
	"context"
	"fmt"
)

// BuildOnce memoises a binary's build for the whole process: the first
// result, success or compiler failure, is every later caller's, except a
// build cut short by its context, which a later call tries again. A
// channel is the lock, so that callers queued behind a running build still
// honour their own context.
type BuildOnce struct {
	sem  chan struct{}
	done bool
	path string
	err  error
}

// NewBuildOnce returns a BuildOnce that has built nothing yet.
func NewBuildOnce() *BuildOnce { return &BuildOnce{sem: make(chan struct{}, 1)} }

// Do returns the path build made, calling build the first time. what
// prefixes the error of a caller whose context ends while it waits.
func (b *BuildOnce) Do(ctx context.Context, what string, build func(context.Context) (string, error)) (string, error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("%s: waiting for the build: %w", what, ctx.Err())
	}
	defer func() { <-b.sem }()
	if b.done {
		return b.path, b.err
	}
	path, err := build(ctx)
	if err != nil && ctx.Err() != nil {
		return "", err
	}
	b.done, b.path, b.err = true, path, err
	return path, err
}
