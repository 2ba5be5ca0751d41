package etcdclient

import "testing"

func TestDialAddress(t *testing.T) {
	for _, tc := range []struct{ ep, network, addr, name string }{
		{"https://10.0.0.1:2379", "tcp", "10.0.0.1:2379", "10.0.0.1"},
		{"https://[::1]:2379", "tcp", "[::1]:2379", "::1"},
		{"etcd.example:2379", "tcp", "etcd.example:2379", "etcd.example"},
		{"unixs:///run/etcd/etcd.sock", "unix", "/run/etcd/etcd.sock", "etcd.sock"},
		{"unix://etcd.sock", "unix", "etcd.sock", "etcd.sock"},
		{"unix:run/etcd.sock", "unix", "run/etcd.sock", "etcd.sock"},
	} {
		network, addr, name := dialAddress(tc.ep)
		if network != tc.network || addr != tc.addr || name != tc.name {
			t.Errorf("dialAddress(%q) = %q, %q, %q; want %q, %q, %q",
				tc.ep, network, addr, name, tc.network, tc.addr, tc.name)
		}
	}
}
