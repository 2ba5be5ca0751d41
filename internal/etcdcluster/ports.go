package etcdcluster

import "github.com/rollwal/rollwal/internal/testproc"

// pickPortsFn is testproc.PickPorts, replaced by tests to provoke a port
// race.
var pickPortsFn = testproc.PickPorts
