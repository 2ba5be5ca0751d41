// Package objstore holds rollwal's immutable files — generations, base data
// files, Iceberg metadata — by name, on the local filesystem (the default,
// through package vfs) or on S3-compatible object storage.
//
// # The contract
//
// An object is written once and never changed: Create writes it unless the
// name exists, and nothing ever overwrites it. Callers choose names unique
// to an attempt (a generation number, a merge attempt id), so a retry of the
// same attempt meets its own object and a different attempt never collides.
//
//	Create(name, bytes) ── name absent ──► the object, whole, durable   (nil)
//	                   └── name present ─► nothing changed              (ErrExists)
//	                   └── answer lost ──► read back and compare:
//	                                         our bytes    → nil
//	                                         other bytes  → ErrExists
//	                                         absent/unreadable → ErrUnknownOutcome
//
// An answer is lost when a request may have applied but its reply did not
// arrive: a timeout or a connection reset after the request was sent, or a
// 5xx. Such a Create is never assumed to have failed nor to have succeeded:
// the next attempt is conditional too (If-None-Match: *), and when it finds
// the name taken the object is read back and compared byte for byte with
// what this call wrote. A caller that gets ErrUnknownOutcome must treat the
// name as possibly written, now or later (a request still in flight may yet
// land): abandon it for a fresh attempt name and leave it to orphan removal.
//
// # Names
//
// Names are slash-separated relative paths, "gen/00000001.parquet": no
// leading slash, no empty, "." or ".." segments, valid UTF-8 without control
// characters or backslashes, at most MaxNameLen bytes, and no segment ending in the
// reserved TempSuffix. Prefixes for List are names or names with a trailing
// slash, or empty. On file:// a name's parent segments are directories, so
// "a" and "a/b" cannot both be objects there; on s3:// they can, but code
// that must run on both does not rely on it.
//
// # Backends
//
// file:///abs/dir keeps each object as a file under dir. Create writes a
// temporary file beside the final one (its segment ends in TempSuffix),
// syncs it, links it into place with vfs.FS.Link, which never replaces an
// existing name, removes the temporary name and syncs the directory, so a
// crash leaves either nothing or the whole object, and a leftover
// temporary file is never listed. Creates racing on one name, in one
// process or several sharing the directory, have exactly one winner; the
// others get ErrExists.
//
// s3://bucket/prefix keeps each object under prefix/name, written with
// PutObject (If-None-Match: *), or above Options.PartSize with a multipart
// upload whose CompleteMultipartUpload carries If-None-Match: *; a failed
// multipart upload is aborted. Reads are ranged GETs. Every request is
// retried a bounded number of times with jittered exponential backoff on
// 5xx, throttling (429, 503 SlowDown, 409 concurrent conditional write) and
// network errors; the SDK's own retryer is off, so that this package sees
// every attempt and can apply the lost-answer rule. See docs/objstore.md.
//
// # Concurrency
//
// A Store and its Objects are safe for concurrent use.
package objstore
