package s3test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports are drawn from [portLow, ephemeral range start): a port below the
// kernel's ephemeral range is never handed out as the local port of an
// outgoing connection, so a server restarted on its old port does not find
// it taken by some client's connection.
const portLow = 20000

// pickPortFn is pickPort, replaced by tests to provoke a port race.
var pickPortFn = pickPort

// pickPort returns a TCP port that is free on 127.0.0.1 right now. It is
// released before returning, so another process may take it before
// versitygw binds it; Start retries on "address already in use".
func pickPort() (int, error) {
	if hi := ephemeralLow(); hi-portLow >= 1000 {
		for range 100 {
			l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(portLow+rand.IntN(hi-portLow)))
			if err != nil {
				continue
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			return port, nil
		}
	}
	// The range is small or crowded: take a kernel-chosen port.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("s3test: pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil {
				return lo
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return portLow // unreadable: use kernel-chosen ports only
	}
	return 32768 // Linux default; IANA's dynamic range starts at 49152
}
