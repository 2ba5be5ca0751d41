package s3test

import (
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestStartRetriesLostPortRace: the first port Start picks is taken by
// someone else before versitygw binds it. Start must notice the exit with
// "address already in use" and come up on another port. Not parallel: it
// replaces pickPortFn.
func TestStartRetriesLostPortRace(t *testing.T) {
	taken, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	picks := 0
	pickPortFn = func() (int, error) {
		picks++
		if picks == 1 {
			return takenPort, nil
		}
		return pickPort()
	}
	defer func() { pickPortFn = pickPort }()

	srv := Start(t)
	if picks < 2 {
		t.Fatalf("Start picked %d port(s); it should have retried after losing port %d", picks, takenPort)
	}
	if srv.port == takenPort {
		t.Fatalf("Start claims to serve on the taken port %d", takenPort)
	}
	if !strings.Contains(srv.Output(), "address already in use") {
		t.Fatalf("the output does not show the lost race:\n%s", srv.Output())
	}
	srv.Bucket(t) // and it serves
}

// TestCheckXattrsNamesTheCause: a filesystem without user xattrs (sysfs) is
// reported with the directory, TMPDIR and the cause.
func TestCheckXattrsNamesTheCause(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("checkXattrs probes only on Linux")
	}
	if _, err := os.Stat("/sys/kernel"); err != nil {
		t.Skip("no sysfs:", err)
	}
	err := checkXattrs("/sys/kernel")
	if err == nil {
		t.Skip("sysfs accepts user xattrs here")
	}
	for _, want := range []string{"/sys/kernel", "TMPDIR", "extended attributes", "versitygw"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if err := checkXattrs(t.TempDir()); err != nil {
		t.Fatalf("t.TempDir() refuses xattrs, so Start cannot work here: %v", err)
	}
}
