package main

// Who owns a data directory, and whose etcd its endpoint file names.
//
// Every process that writes a data directory holds its lock
// (<data-dir>/LOCK, internal/dirlock): serve and generate always, and merge,
// inspect and snapshot get when they start the embedded etcd themselves. A
// process that runs the embedded etcd records it in <data-dir>/etcd.endpoint
// so that merge, inspect and snapshot get can use that etcd while it runs:
//
//	{"endpoints":["http://127.0.0.1:41234"],"cluster_id":"e75700c5e2c7c3ee",
//	 "identity":"9c1e…","data_dir":"/var/lib/rollwal","pid":4242,"command":"serve"}
//
// Before using a recorded etcd a command proves it is this directory's: the
// etcd answers within seconds, its cluster id is the recorded one, and its
// identity key (identityKey) holds the recorded identity and this data
// directory's path. A mismatch is refused and nothing is written (a merge of
// one directory through another's metadata would collect the first's base
// files as garbage). When nothing answers, the directory's lock decides: free,
// the file is stale (its writer is gone) and the command starts the embedded
// etcd itself; held, it fails at once naming the holder.
//
// Where the identity lives: in the embedded etcd itself, under identityKey,
// created at its first start — not in a file of its own beside it. The check
// asks the etcd at the endpoint "whose are you?", so the answer must come from
// that etcd's data; an identity file could be restored or copied apart from
// etcd/ and then vouch for the wrong metadata. The cluster id alone proves
// little here: every embedded etcd is a one-member cluster of the same name
// and peer URL, so all of them share one cluster id; it is checked anyway, as
// it tells any other etcd that took the port (a cluster of its own) apart. The identity key also
// carries the directory's path, rewritten when the directory starts somewhere
// else, so that a copy of a running directory (same identity) is told from
// the original; the random id tells apart two directories at one path (two
// containers on one host network).

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rollwal/rollwal/internal/dirlock"
	"github.com/rollwal/rollwal/internal/etcdclient"
	"github.com/rollwal/rollwal/layout"
	"github.com/rollwal/rollwal/vfs"
)

// The log lines that name a stale endpoint file.
const (
	msgStaleRemoved = "stale etcd endpoint file; removing it"
	msgStaleStarted = "stale etcd endpoint file; starting the data directory's own embedded etcd"
)

// identityKey holds the data directory's identity in its embedded etcd.
const identityKey = "/" + metaPrefix + "/_identity"

// Bounds of the check of a recorded endpoint: a TCP connect, then the
// etcd's answers.
const (
	endpointDialTimeout  = time.Second
	endpointCheckTimeout = 3 * time.Second
)

// dirUse is what a command does with its data directory.
type dirUse struct {
	command string // recorded in the lock and named in messages: "serve", "merge", …
	// writes: the command writes the data directory's WAL or generations
	// (serve, generate) and holds the lock whatever etcd it uses. Otherwise
	// it may use the etcd a running process recorded, and locks only to
	// start the embedded etcd itself.
	writes bool
	// follow: use only the etcd a running process recorded (or the
	// configured cluster), never start the embedded one. merge --every
	// follows: holding the data directory's lock to run the embedded etcd,
	// it would keep the serve it works beside from starting again.
	follow bool
}

// endpointRecord is the JSON of <data-dir>/etcd.endpoint.
type endpointRecord struct {
	Endpoints []string `json:"endpoints"`
	ClusterID string   `json:"cluster_id"` // hex, as etcdctl prints it
	Identity  string   `json:"identity"`   // dirIdentity.ID
	DataDir   string   `json:"data_dir"`   // absolute, symlinks resolved
	Pid       int      `json:"pid"`
	Command   string   `json:"command"`
}

// dirIdentity is the value of identityKey.
type dirIdentity struct {
	ID      string    `json:"id"`       // random, made once
	DataDir string    `json:"data_dir"` // where the directory last started its etcd
	Created time.Time `json:"created"`
}

// endpointFile is where a process running the embedded etcd records it.
func endpointFile(dataDir string) string { return layout.EtcdEndpointFile(dataDir) }

// absDir is dataDir as the records name it: absolute, symlinks resolved.
func absDir(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return filepath.Clean(dataDir)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

func writeEndpoint(path string, rec endpointRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := layout.EndpointTemp(path)
	f, err := vfs.Default.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	err = errors.Join(err, f.Sync(), f.Close())
	if err != nil {
		return err
	}
	return vfs.Default.Rename(tmp, path)
}

// recorded is what <data-dir>/etcd.endpoint says.
type recorded struct {
	path  string
	found bool
	rec   endpointRecord
	// unverifiable says why rec cannot be checked ("" when it can): the
	// one-line format of earlier versions, damage, or a record written for
	// another directory.
	unverifiable string
}

func readEndpoint(dataDir string) recorded {
	r := recorded{path: endpointFile(dataDir)}
	f, err := vfs.Default.Open(r.path)
	if err != nil {
		return r
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		r.found, r.unverifiable = true, fmt.Sprintf("unreadable: %v", err)
		return r
	}
	r.found = true
	text := strings.TrimSpace(string(b))
	if !strings.HasPrefix(text, "{") {
		r.unverifiable = fmt.Sprintf("it names %q without the etcd's cluster id and the directory's identity (the format of an earlier version)", text)
		return r
	}
	if err := json.Unmarshal([]byte(text), &r.rec); err != nil || len(r.rec.Endpoints) == 0 || r.rec.Identity == "" {
		r.unverifiable = fmt.Sprintf("not a valid endpoint record (%.100q)", text)
		return r
	}
	if want := absDir(dataDir); r.rec.DataDir != want {
		r.unverifiable = fmt.Sprintf("it was written for data directory %s, not %s (a copy?)", r.rec.DataDir, want)
	}
	return r
}

// errNotAnswering marks a recorded etcd that gave no usable answer: the lock
// then decides whether the record is stale.
var errNotAnswering = errors.New("does not answer")

// endpointMismatchError refuses a recorded etcd that answers as another's.
type endpointMismatchError struct {
	endpoint, file string
	found, want    string // what the etcd is, what the record says
	hint           string
}

func (e *endpointMismatchError) Error() string {
	return fmt.Sprintf("etcd at %s serves %s, not %s: the endpoint file %s is stale; nothing was written. %s",
		e.endpoint, e.found, e.want, e.file, e.hint)
}

// openRecorded returns a client of the etcd recorded in r when it proves to
// be dataDir's; an errNotAnswering error when nothing usable answers there;
// an *endpointMismatchError when it proves to be another's.
func openRecorded(ctx context.Context, dataDir string, r recorded) (*clientv3.Client, error) {
	ep := strings.Join(r.rec.Endpoints, ",")
	if !reachable(r.rec.Endpoints) {
		return nil, fmt.Errorf("the etcd recorded in %s at %s %w (nothing listens there)", r.path, ep, errNotAnswering)
	}
	cli, err := etcdclient.New(ctx, etcdclient.Config{Endpoints: r.rec.Endpoints,
		DialTimeout: endpointCheckTimeout, RequestTimeout: endpointCheckTimeout})
	if err != nil {
		return nil, fmt.Errorf("the etcd recorded in %s at %s %w as etcd: %v", r.path, ep, errNotAnswering, err)
	}
	rctx, cancel := context.WithTimeout(ctx, endpointCheckTimeout)
	defer cancel()
	resp, err := cli.Get(rctx, identityKey)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("the etcd recorded in %s at %s %w: read %s: %v", r.path, ep, errNotAnswering, identityKey, err)
	}
	if err := checkIdentity(dataDir, r, resp); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

// checkIdentity compares what the etcd answered with what r records.
func checkIdentity(dataDir string, r recorded, resp *clientv3.GetResponse) error {
	want := absDir(dataDir)
	mismatch := &endpointMismatchError{endpoint: hostsOf(r.rec.Endpoints), file: r.path,
		want: fmt.Sprintf("data directory %s (identity %s, cluster %s)", want, r.rec.Identity, r.rec.ClusterID),
		hint: staleHint(dataDir, r.path)}
	if got := clusterID(resp.Header.GetClusterId()); got != r.rec.ClusterID {
		mismatch.found = "cluster " + got
		return mismatch
	}
	if len(resp.Kvs) == 0 {
		mismatch.found = fmt.Sprintf("no rollwal data directory (no %s key)", identityKey)
		return mismatch
	}
	var id dirIdentity
	if err := json.Unmarshal(resp.Kvs[0].Value, &id); err != nil || id.ID == "" {
		mismatch.found = fmt.Sprintf("a %s key that is not a data directory identity (%.100q)", identityKey, resp.Kvs[0].Value)
		return mismatch
	}
	if id.ID != r.rec.Identity || id.DataDir != want {
		mismatch.found = fmt.Sprintf("data directory %s (identity %s)", id.DataDir, id.ID)
		return mismatch
	}
	return nil
}

// staleHint says what to do about a stale endpoint file.
func staleHint(dataDir, file string) string {
	h, held, err := dirlock.Holding(dataDir)
	switch {
	case err != nil:
		return fmt.Sprintf("(the data directory's lock cannot be read: %v)", err)
	case held:
		return fmt.Sprintf("The data directory is held by %s: stop it, or wait until it has recorded its own etcd.", h)
	}
	return fmt.Sprintf("No process holds the data directory: remove %s and run the command again (it then starts the data directory's own embedded etcd).", file)
}

func clusterID(id uint64) string { return strconv.FormatUint(id, 16) }

// hostsOf names endpoints as the messages do: host:port.
func hostsOf(endpoints []string) string {
	hosts := make([]string, len(endpoints))
	for i, ep := range endpoints {
		hosts[i] = ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			hosts[i] = u.Host
		}
	}
	return strings.Join(hosts, ",")
}

// reachable reports whether any endpoint accepts a connection at all: a
// dead endpoint is told at once, not after etcd's dial timeout.
func reachable(endpoints []string) bool {
	for _, ep := range endpoints {
		network, addr := "tcp", ep
		if u, err := url.Parse(ep); err == nil {
			switch {
			case u.Scheme == "unix" || u.Scheme == "unixs":
				network, addr = "unix", u.Host+u.Path
			case u.Host != "":
				addr = u.Host
			}
		}
		if conn, err := net.DialTimeout(network, addr, endpointDialTimeout); err == nil {
			conn.Close()
			return true
		}
	}
	return false
}

// ensureIdentity returns the directory's identity from its embedded etcd,
// creating it at the first start and recording the directory's path when it
// started elsewhere before; the answer's header carries the cluster id. The
// caller holds the directory's lock, so nothing races it.
func ensureIdentity(ctx context.Context, cli *clientv3.Client, dataDir string, timeout time.Duration, log *slog.Logger) (dirIdentity, uint64, error) {
	if timeout <= 0 {
		timeout = etcdclient.DefaultRequestTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := cli.Get(ctx, identityKey)
	if err != nil {
		return dirIdentity{}, 0, fmt.Errorf("read the data directory's identity (%s): %w", identityKey, err)
	}
	cluster := resp.Header.GetClusterId()
	if len(resp.Kvs) == 0 {
		id := dirIdentity{ID: rand.Text(), DataDir: dataDir, Created: time.Now().UTC().Truncate(time.Second)}
		return id, cluster, putIdentity(ctx, cli, id, clientv3.Compare(clientv3.CreateRevision(identityKey), "=", 0))
	}
	kv := resp.Kvs[0]
	var id dirIdentity
	if err := json.Unmarshal(kv.Value, &id); err != nil || id.ID == "" {
		return dirIdentity{}, 0, fmt.Errorf("the embedded etcd's %s holds %.100q, not a data directory identity: refusing to guess whose metadata this is", identityKey, kv.Value)
	}
	if id.DataDir == dataDir {
		return id, cluster, nil
	}
	log.Warn("the data directory started elsewhere before (moved or copied); recording its new path", "identity", id.ID, "was", id.DataDir, "now", dataDir)
	id.DataDir = dataDir
	return id, cluster, putIdentity(ctx, cli, id, clientv3.Compare(clientv3.ModRevision(identityKey), "=", kv.ModRevision))
}

func putIdentity(ctx context.Context, cli *clientv3.Client, id dirIdentity, guard clientv3.Cmp) error {
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	resp, err := cli.Txn(ctx).If(guard).Then(clientv3.OpPut(identityKey, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("record the data directory's identity (%s): %w", identityKey, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("record the data directory's identity (%s): it changed meanwhile; another process uses this etcd", identityKey)
	}
	return nil
}

// dropStaleEndpoint removes an endpoint file left by a process that died
// (the caller holds the lock: no live process owns it), naming it.
func dropStaleEndpoint(dataDir string, log *slog.Logger, why string) {
	path := endpointFile(dataDir)
	if _, err := vfs.Default.Stat(path); err != nil {
		return
	}
	log.Warn(msgStaleRemoved, "file", path, "reason", why)
	if err := vfs.Default.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("remove the stale etcd endpoint file", "file", path, "err", err)
	}
}
