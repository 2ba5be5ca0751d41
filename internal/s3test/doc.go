// Package s3test runs a real S3 server, versitygw, as a separate OS process
// for tests that talk to object storage: conditional writes (If-None-Match,
// If-Match) are answered by a real implementation, not a mock, and a test can
// stop, kill and restart the server in the middle of an operation.
//
// It is a test helper. Import it only from _test.go files.
//
// # The binary
//
// versitygw is not downloaded as a binary. [Build] compiles
// github.com/versity/versitygw/cmd/versitygw at exactly [Version] with the go
// command of the toolchain that built the test binary, fetching the module
// through the Go module proxy like any other dependency. The binary is written
// to a directory under [os.TempDir] whose name is a hash of the module, its
// version and the Go version; a file lock in that directory makes concurrent
// test binaries (go test ./... runs packages in parallel) wait for one build
// instead of each doing its own. The first cold build takes a minute or more;
// later runs reuse the binary. [Start] calls Build itself.
//
// # Usage
//
//	func TestUpload(t *testing.T) {
//		srv := s3test.Start(t)
//		bucket := srv.Bucket(t) // a fresh, empty bucket
//		cli := srv.Client(t)    // path-style, signed with the server's credentials
//		_, err := cli.PutObject(ctx, &s3.PutObjectInput{
//			Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("v"),
//			IfNoneMatch: aws.String("*"),
//		})
//		...
//		if err := srv.Kill(); err != nil { // crash the server mid-operation
//			t.Fatal(err)
//		}
//		if err := srv.Restart(); err != nil { // same port, data and credentials
//			t.Fatal(err)
//		}
//	}
//
// Every server listens on 127.0.0.1 only, on a port chosen below the kernel's
// ephemeral port range, so that a restart on the old port does not collide
// with the local port of an outgoing connection. A start that loses the port
// to another process is retried on a fresh port; a restart, on the same port
// until its wait ends. Each server gets its own t.TempDir as its posix root
// and a random access key and secret: Start and Restart wait (up to 30 s)
// until a request signed with those credentials succeeds, which a server that
// is not ours cannot answer. The posix backend keeps object metadata in
// extended attributes; Start fails, naming the directory and TMPDIR, when the
// filesystem under t.TempDir does not support user xattrs.
//
// # Lifetime
//
// Start registers a t.Cleanup that stops the server (SIGTERM, SIGKILL after
// 10 s) and waits for it; the root is removed afterwards by the testing
// package. On Linux the server is also started with Pdeathsig=SIGKILL from a
// dedicated OS thread, so it dies with the test binary even if cleanup never
// runs. The server's output (one line per request) is kept, up to 1 MiB, and
// printed if the test failed; a failed start includes it in its error.
//
// Server methods are safe for concurrent use. Stop, Kill and Restart return
// errors instead of failing the test, so a chaos goroutine may call them.
package s3test
