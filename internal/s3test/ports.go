package s3test

import "github.com/rollwal/rollwal/internal/testproc"

// pickPortFn is pickPort, replaced by tests to provoke a port race.
var pickPortFn = pickPort

// pickPort returns a TCP port that is free on 127.0.0.1 right now (see
// testproc.PickPorts); Start retries on "address already in use".
func pickPort() (int, error) {
	ports, err := testproc.PickPorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
