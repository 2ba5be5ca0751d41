// Package testproc is what the tests that run real server processes
// (internal/etcdcluster, internal/s3test) share: a spawner whose processes
// die with the test binary, free ports below the ephemeral range, the
// tail of a process's output, and the go command that builds them.
package testproc
