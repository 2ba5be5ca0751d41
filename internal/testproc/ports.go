package testproc

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
// outgoing connection, so a server restarted on its old ports does not find
// one of them taken by a client or a peer connection.
const portLow = 20000

// PickPorts returns n distinct TCP ports that are free on 127.0.0.1 right
// now. They are released before returning, so a process may still take one
// before the server binds it; callers retry on "address already in use".
func PickPorts(n int) ([]int, error) {
	hi := ephemeralLow()
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	if hi-portLow >= 1000 {
		for tries := 0; len(ports) < n && tries < 100*n; tries++ {
			l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(portLow+rand.IntN(hi-portLow)))
			if err != nil {
				continue
			}
			held = append(held, l)
			ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		}
	}
	// Fall back to kernel-chosen ports if the range is small or crowded.
	for len(ports) < n {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testproc: pick ports: %w", err)
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
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
