// Package vfs is the only path from rollwal to a disk.
//
// Every package that touches files takes an FS from its Options, so the same
// code runs on the operating system's filesystem (Default), on a strict
// in-memory filesystem that forgets whatever was not synced when a crash is
// simulated (NewStrictMem), and behind an error-injecting wrapper that fails
// the n-th write, sync, rename or link (see inject.go).
//
// The interface is deliberately narrow: what a log-structured writer needs
// and nothing more. Durability follows POSIX as ext4/xfs behave with
// data=ordered: File.Sync makes a file's data durable; a directory entry
// (a create, rename, link or remove) becomes durable only when the directory
// that holds it is synced through OpenDir(dir).Sync().
//
// Rename replaces its target; Link never does, so Link is the create-if-absent
// that is exclusive across processes sharing a directory: write and sync a
// temporary file, Link it to the final name (fs.ErrExist: somebody else won),
// Remove the temporary name, sync the directory.
package vfs

import (
	"errors"
	"io"
	"os"
)

// ErrLinkUnsupported is the error Link wraps when the filesystem holding the
// names has no hard links (vfat, exfat, some FUSE and network mounts), so no
// create-if-absent built on Link can work there.
var ErrLinkUnsupported = errors.New("vfs: the filesystem does not support hard links")

// File is an open file. Reads and writes through one File are not safe for
// concurrent use unless noted; ReadAt is safe for concurrent readers.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	// WriteAt writes at off without moving the offset Read and Write use;
	// writing past the end extends the file, zero-filling any gap.
	io.WriterAt
	io.Closer
	// Sync makes the file's data (and its size) durable.
	Sync() error
	// Stat reports the file's current size and mode.
	Stat() (os.FileInfo, error)
	// Preallocate reserves n bytes from offset off without changing the
	// visible size, where the filesystem supports it; elsewhere a no-op.
	Preallocate(off, n int64) error
	// Truncate changes the file's size.
	Truncate(size int64) error
}

// FS is a filesystem. Names are slash- or OS-separated paths; all
// implementations accept paths joined with path/filepath.
type FS interface {
	// Create creates or truncates the named file for reading and writing.
	Create(name string) (File, error)
	// Open opens the named file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing, with the
	// write offset at the start of the file.
	OpenReadWrite(name string) (File, error)
	// OpenDir opens a directory so that it can be synced.
	OpenDir(name string) (File, error)
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// Link makes newname another name of oldname's file (a hard link),
	// atomically and without ever replacing: if newname exists, in this
	// process or any other, Link fails with an error that satisfies
	// errors.Is(err, fs.ErrExist) and changes nothing. oldname must be a
	// file. Like a create, the new entry is durable once its directory is
	// synced. On a filesystem without hard links Link fails with
	// ErrLinkUnsupported.
	Link(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a directory tree; a missing path is not an error.
	RemoveAll(name string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names (not paths) of a directory's entries, sorted.
	List(dir string) ([]string, error)
	// Stat describes the named file.
	Stat(name string) (os.FileInfo, error)
}
