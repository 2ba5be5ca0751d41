package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is a strict in-memory filesystem for crash tests: it remembers,
// next to what was written, exactly what a power loss would leave behind.
//
// The model is the one the package doc promises for a real disk:
//
//	dir inode ── children (live) ──► inode ── data   (live bytes)
//	          └─ durable (synced) ─►       └─ synced (bytes as of File.Sync)
//
// A directory entry names an inode; Rename moves the entry, not the data, so
// whatever was synced follows the inode to its new name, and Link adds a
// second entry naming the same inode (a hard link). File.Sync copies a
// file's live bytes to its synced state; OpenDir(dir).Sync() copies a
// directory's live entries to its durable entries. CrashClone keeps only the
// synced and durable halves, so a create, rename, link or remove that was not
// followed by a sync of its directory is undone, and bytes written after the
// last File.Sync are lost.
//
// Relative names resolve against the root, as if the working directory were
// "/": "a/b", "./a/b" and "/a/b" are one file. The root always exists.
//
// All methods are safe for concurrent use; one lock guards the whole tree,
// which is simple and fast enough for tests.
type MemFS struct {
	mu   sync.RWMutex
	root *memNode
	// clock numbers directory entry changes in the order they were made,
	// for CrashCloneWith; guarded by mu.
	clock uint64
}

var _ FS = (*MemFS)(nil)

// memNode is an inode: a file or a directory.
type memNode struct {
	dir  bool
	mode os.FileMode

	// Files. synced shares data's backing array until data outgrows it
	// (shared reports that). A write over bytes synced can see saves them
	// in undo first, so a Sync costs O(1) and a write its own length, not
	// a copy of the whole file: a WAL segment zero-filled ahead is
	// overwritten in place, record by record, after every Sync.
	data   []byte
	synced []byte
	shared bool
	undo   []patch // synced's bytes as they were before each write since, oldest first
	// zeros and syncedZeros are zero bytes that follow data and synced
	// without taking memory: zero-filled space ahead of a WAL's records,
	// or a file extended by Truncate.
	zeros, syncedZeros int64

	// Directories.
	children map[string]*memNode // live entries
	durable  map[string]*memNode // entries as of the last directory sync
	// changed stamps each entry name changed since the last directory sync
	// with the fs clock of its last change (CrashCloneWith keeps a prefix
	// of the changes in that order).
	changed map[string]uint64
}

// NewStrictMem returns an empty MemFS holding only the root directory.
func NewStrictMem() *MemFS {
	return &MemFS{root: newDirNode(0o755)}
}

func newDirNode(perm os.FileMode) *memNode {
	return &memNode{
		dir:      true,
		mode:     os.ModeDir | perm.Perm(),
		children: map[string]*memNode{},
		durable:  map[string]*memNode{},
	}
}

func newFileNode() *memNode { return &memNode{mode: 0o644} }

// patch is a run of bytes of a file as they were before a write.
type patch struct {
	off int64
	old []byte
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// split resolves name against the root and returns its components; the
// root itself has none.
func split(name string) []string {
	p := filepath.ToSlash(filepath.Join("/", name))
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// walk follows comps from the root. Like the helpers below it returns a
// bare errno, which the exported methods wrap with their op and path.
// Callers hold fs.mu.
func (fs *MemFS) walk(comps []string) (*memNode, error) {
	n := fs.root
	for _, c := range comps {
		if !n.dir {
			return nil, syscall.ENOTDIR
		}
		child, ok := n.children[c]
		if !ok {
			return nil, syscall.ENOENT
		}
		n = child
	}
	return n, nil
}

func (fs *MemFS) lookup(name string) (*memNode, error) { return fs.walk(split(name)) }

// parent returns the directory that holds name's entry and the entry's
// name in it. The root has no parent entry, so it cannot be created,
// renamed or removed.
func (fs *MemFS) parent(name string) (*memNode, string, error) {
	comps := split(name)
	if len(comps) == 0 {
		return nil, "", syscall.EINVAL
	}
	dir, err := fs.walk(comps[:len(comps)-1])
	if err != nil {
		return nil, "", err
	}
	if !dir.dir {
		return nil, "", syscall.ENOTDIR
	}
	return dir, comps[len(comps)-1], nil
}

// Create creates or truncates the named file. Truncating keeps the inode,
// as O_TRUNC does, so its synced bytes stay until the next Sync.
func (fs *MemFS) Create(name string) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.parent(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	n, ok := dir.children[base]
	switch {
	case !ok:
		n = newFileNode()
		dir.children[base] = n
		fs.stamp(dir, base)
	case n.dir:
		return nil, pathErr("open", name, syscall.EISDIR)
	default:
		n.resize(0)
	}
	return &memFile{fs: fs, n: n, name: name, writable: true}, nil
}

// Open opens a file or directory read-only.
func (fs *MemFS) Open(name string) (File, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	n, err := fs.lookup(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return &memFile{fs: fs, n: n, name: name}, nil
}

// OpenReadWrite opens an existing file for reading and writing.
func (fs *MemFS) OpenReadWrite(name string) (File, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	n, err := fs.lookup(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if n.dir {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	return &memFile{fs: fs, n: n, name: name, writable: true}, nil
}

// OpenDir opens a directory; its Sync makes the directory's entries durable.
func (fs *MemFS) OpenDir(name string) (File, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	n, err := fs.lookup(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if !n.dir {
		return nil, pathErr("open", name, syscall.ENOTDIR)
	}
	return &memFile{fs: fs, n: n, name: name}, nil
}

// Rename moves oldname's entry to newname, replacing what newname held
// under the same rules as rename(2). Like os.Rename it returns
// *os.LinkError.
func (fs *MemFS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.rename(oldname, newname); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// rename returns a bare errno; Rename adds the names. Callers hold fs.mu.
func (fs *MemFS) rename(oldname, newname string) error {
	odir, obase, err := fs.parent(oldname)
	if err != nil {
		return err
	}
	n, ok := odir.children[obase]
	if !ok {
		return syscall.ENOENT
	}
	ndir, nbase, err := fs.parent(newname)
	if err != nil {
		return err
	}
	target := ndir.children[nbase]
	if target == n {
		return nil
	}
	if err := canReplace(n, target); err != nil {
		return err
	}
	if n.dir && isBelow(split(newname), split(oldname)) {
		return syscall.EINVAL
	}
	delete(odir.children, obase)
	ndir.children[nbase] = n
	// One change stamped on both names: a rename lands whole or not at all.
	t := fs.tick()
	odir.mark(obase, t)
	ndir.mark(nbase, t)
	return nil
}

// Link adds newname as another entry of oldname's inode, under the rules
// of link(2): never over an existing entry (EEXIST), never of a directory
// (EPERM). The new entry is a directory entry change like a create: a crash
// undoes it unless newname's directory is synced after it, and the inode's
// synced bytes are what either name reads after the crash. Like os.Link it
// returns *os.LinkError.
func (fs *MemFS) Link(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.link(oldname, newname); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// link returns a bare errno, checked in link(2)'s order; Link adds the
// names. Callers hold fs.mu.
func (fs *MemFS) link(oldname, newname string) error {
	n, err := fs.lookup(oldname)
	if err != nil {
		return err
	}
	ndir, nbase, err := fs.parent(newname)
	if err != nil {
		return err
	}
	if _, taken := ndir.children[nbase]; taken {
		return syscall.EEXIST
	}
	if n.dir {
		return syscall.EPERM
	}
	ndir.children[nbase] = n
	fs.stamp(ndir, nbase)
	return nil
}

// canReplace reports whether src may be renamed over dst (nil: no entry).
func canReplace(src, dst *memNode) error {
	switch {
	case dst == nil:
		return nil
	case !src.dir && dst.dir:
		return syscall.EISDIR
	case src.dir && !dst.dir:
		return syscall.ENOTDIR
	case src.dir && len(dst.children) > 0:
		return syscall.ENOTEMPTY
	}
	return nil
}

// isBelow reports whether path p lies strictly inside directory d.
func isBelow(p, d []string) bool {
	return len(p) > len(d) && slices.Equal(p[:len(d)], d)
}

// stamp records a change of dir's entry name at the next clock tick.
// Callers hold fs.mu for writing.
func (fs *MemFS) stamp(dir *memNode, name string) { dir.mark(name, fs.tick()) }

func (fs *MemFS) tick() uint64 {
	fs.clock++
	return fs.clock
}

func (n *memNode) mark(name string, t uint64) {
	if n.changed == nil {
		n.changed = map[string]uint64{}
	}
	n.changed[name] = t
}

// Remove removes a file or an empty directory.
func (fs *MemFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.parent(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	n, ok := dir.children[base]
	if !ok {
		return pathErr("remove", name, syscall.ENOENT)
	}
	if n.dir && len(n.children) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(dir.children, base)
	fs.stamp(dir, base)
	return nil
}

// RemoveAll detaches a directory tree from its parent. The detached inodes
// keep their synced state, so if the parent is not synced afterwards the
// whole tree comes back after a crash, as it was last synced. The root
// cannot be removed (os.RemoveAll likewise refuses ".").
func (fs *MemFS) RemoveAll(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.parent(name)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return pathErr("unlinkat", name, err)
	}
	delete(dir.children, base)
	fs.stamp(dir, base)
	return nil
}

// MkdirAll creates dir and any missing parents. New directories survive a
// crash only once their parent has been synced.
func (fs *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.root
	for _, c := range split(dir) {
		child, ok := n.children[c]
		if !ok {
			child = newDirNode(perm)
			n.children[c] = child
			fs.stamp(n, c)
		} else if !child.dir {
			return pathErr("mkdir", dir, syscall.ENOTDIR)
		}
		n = child
	}
	return nil
}

// List returns the sorted names of a directory's live entries.
func (fs *MemFS) List(dir string) ([]string, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	n, err := fs.lookup(dir)
	if err != nil {
		return nil, pathErr("open", dir, err)
	}
	if !n.dir {
		return nil, pathErr("readdirent", dir, syscall.ENOTDIR)
	}
	return slices.Sorted(maps.Keys(n.children)), nil
}

// Stat describes the named file or directory.
func (fs *MemFS) Stat(name string) (os.FileInfo, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	n, err := fs.lookup(name)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return n.info(name), nil
}

// CrashClone returns a new, independent MemFS holding what a power loss
// would leave now: every file's bytes as of its last Sync and every
// directory's entries as of its last directory sync, reachable from the
// root. Open files of the receiver do not carry over; the receiver itself
// is unchanged and may be used further.
func (fs *MemFS) CrashClone() *MemFS {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	return &MemFS{root: crashCopy(fs.root, map[*memNode]*memNode{})}
}

// crashCopy copies the durable view of n. seen keeps an inode that two
// durable entries name (a rename whose source and target directories were
// both synced at different times) one inode in the copy, and stops the
// recursion should durable entries of separately synced directories form a
// cycle.
func crashCopy(n *memNode, seen map[*memNode]*memNode) *memNode {
	if c, ok := seen[n]; ok {
		return c
	}
	c := &memNode{dir: n.dir, mode: n.mode}
	seen[n] = c
	if !n.dir {
		c.data, c.zeros = bytes.Clone(n.durableData()), n.syncedZeros
		c.sync()
		return c
	}
	c.children = make(map[string]*memNode, len(n.durable))
	for name, child := range n.durable {
		c.children[name] = crashCopy(child, seen)
	}
	c.durable = maps.Clone(c.children)
	return c
}

// CrashCloneOptions says how much of what was not synced a crash keeps.
type CrashCloneOptions struct {
	// UnsyncedDataPercent, 0–100, is the chance that each unsynced change
	// survives the crash: a file's unsynced bytes (a random part of them),
	// and each directory entry change (in order: see CrashCloneWith). 0
	// keeps nothing unsynced, as CrashClone does; 100 keeps everything, as
	// a crash of the process alone (not of the machine) would.
	UnsyncedDataPercent int
	// RNG draws every choice, so that a seeded RNG makes the clone
	// reproducible (given the same filesystem); nil draws from a randomly
	// seeded one.
	RNG *rand.Rand
}

// CrashCloneWith is CrashClone for a disk that wrote back part of what was
// not synced before the power went:
//
//   - a file whose live bytes differ from its synced ones keeps, with
//     probability UnsyncedDataPercent, a random part of the difference: a
//     random prefix of it (a torn append: the file ends inside a record),
//     random blocks of it (holes: blocks not written back read as their old
//     bytes, or as zeros past the synced length), or all of it; the file's
//     size lies between its synced and its live size. Otherwise it keeps
//     its synced bytes, as CrashClone does. At 100 it keeps all of it;
//   - the directory entry changes not yet made durable by a directory sync
//     (creates, links, removes, renames, new directories) survive as a prefix of
//     the order they were made in, as a journaling filesystem commits its
//     metadata: each survives with probability UnsyncedDataPercent, and the
//     first one lost takes every later one with it. A rename is one change,
//     so it lands whole or not at all.
//
// What a sync made durable survives unless an unsynced change that survives
// replaced it. Choices are drawn in path order, so a seeded RNG over the
// same tree makes the same clone.
func (fs *MemFS) CrashCloneWith(o CrashCloneOptions) *MemFS {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	rng := o.RNG
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	c := &tornCloner{rng: rng, percent: min(max(o.UnsyncedDataPercent, 0), 100), seen: map[*memNode]*memNode{}}
	c.cut = c.entryCut(fs.root)
	return &MemFS{root: c.copy(fs.root)}
}

// tornCloner makes one CrashCloneWith copy.
type tornCloner struct {
	rng     *rand.Rand
	percent int
	seen    map[*memNode]*memNode
	// cut is the stamp of the last directory entry change that survives.
	cut uint64
}

func (c *tornCloner) chance() bool { return c.rng.IntN(100) < c.percent }

// entryCut draws how many of the unsynced entry changes under root
// survive and returns the stamp of the last of them (0: none).
func (c *tornCloner) entryCut(root *memNode) uint64 {
	var stamps []uint64
	seen := map[*memNode]bool{}
	var walk func(n *memNode)
	walk = func(n *memNode) {
		if seen[n] || !n.dir {
			return
		}
		seen[n] = true
		for _, t := range n.changed {
			stamps = append(stamps, t)
		}
		for _, child := range n.children {
			walk(child)
		}
		for _, child := range n.durable {
			walk(child)
		}
	}
	walk(root)
	slices.Sort(stamps)
	stamps = slices.Compact(stamps)
	var cut uint64
	for _, t := range stamps {
		if !c.chance() {
			break
		}
		cut = t
	}
	return cut
}

func (c *tornCloner) copy(n *memNode) *memNode {
	if cp, ok := c.seen[n]; ok {
		return cp
	}
	cp := &memNode{dir: n.dir, mode: n.mode}
	c.seen[n] = cp
	if !n.dir {
		cp.data = c.tornData(n.durableFull(), n.full())
		cp.trimZeros()
		cp.sync()
		return cp
	}
	names := slices.Collect(maps.Keys(n.children))
	for name := range n.durable {
		if _, live := n.children[name]; !live {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	cp.children = make(map[string]*memNode, len(names))
	for _, name := range names {
		child := n.durable[name]
		if t := n.changed[name]; t != 0 && t <= c.cut {
			child = n.children[name]
		}
		if child != nil {
			cp.children[name] = c.copy(child)
		}
	}
	cp.durable = maps.Clone(cp.children)
	return cp
}

// tornData returns what survives of a file whose synced bytes are old and
// whose live bytes are cur.
func (c *tornCloner) tornData(old, cur []byte) []byte {
	first := 0 // the first byte where they differ
	for first < len(old) && first < len(cur) && old[first] == cur[first] {
		first++
	}
	switch {
	case len(old) == len(cur) && first == len(cur), !c.chance():
		return bytes.Clone(old)
	case c.percent == 100:
		return bytes.Clone(cur)
	}
	was := func(i int) byte { // what a block not written back reads as
		if i < len(old) {
			return old[i]
		}
		return 0
	}
	is := func(i int) byte {
		if i < len(cur) {
			return cur[i]
		}
		return was(i)
	}
	lo, hi := min(len(old), len(cur)), max(len(old), len(cur))
	switch c.rng.IntN(4) {
	case 0: // all of it
		return bytes.Clone(cur)
	case 1: // random blocks of it, and a size between the two
		size := lo + c.rng.IntN(hi-lo+1)
		block := []int{64, 512, 4096}[c.rng.IntN(3)]
		out := make([]byte, size)
		for start := 0; start < size; start += block {
			fresh := start+block > first && c.rng.IntN(2) == 0
			for i := start; i < min(start+block, size); i++ {
				if fresh {
					out[i] = is(i)
				} else {
					out[i] = was(i)
				}
			}
		}
		return out
	default: // a prefix of it: the file ends, or the new bytes stop, at a cut
		cut := first + c.rng.IntN(hi-first+1)
		size := max(len(old), cut)
		if cut >= len(cur) {
			size = len(cur)
		}
		out := make([]byte, size)
		for i := range out {
			if i < cut {
				out[i] = is(i)
			} else {
				out[i] = was(i)
			}
		}
		return out
	}
}

// String lists every reachable file and directory, one a line, in path
// order: files with their live and synced sizes, and "(entry not synced)"
// where a crash would lose the entry itself.
func (fs *MemFS) String() string {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	var b strings.Builder
	b.WriteString("/\n")
	dump(&b, fs.root, "/", map[*memNode]bool{fs.root: true})
	return b.String()
}

func dump(b *strings.Builder, dir *memNode, prefix string, seen map[*memNode]bool) {
	for _, name := range slices.Sorted(maps.Keys(dir.children)) {
		n := dir.children[name]
		note := ""
		if dir.durable[name] != n {
			note = " (entry not synced)"
		}
		if !n.dir {
			fmt.Fprintf(b, "%s%s size=%d synced=%d%s\n", prefix, name, n.size(), int64(len(n.synced))+n.syncedZeros, note)
			continue
		}
		fmt.Fprintf(b, "%s%s/%s\n", prefix, name, note)
		if !seen[n] {
			seen[n] = true
			dump(b, n, prefix+name+"/", seen)
		}
	}
}

// sync records the live bytes as the durable ones, sharing the array.
func (n *memNode) sync() {
	n.synced, n.syncedZeros = n.data[:len(n.data):len(n.data)], n.zeros
	n.shared, n.undo = true, nil
}

// size is the file's live size.
func (n *memNode) size() int64 { return int64(len(n.data)) + n.zeros }

// durableData returns the bytes as of the last Sync, but for their
// trailing syncedZeros. It is synced itself unless writes since changed
// the shared array; callers must not modify it.
func (n *memNode) durableData() []byte {
	if len(n.undo) == 0 {
		return n.synced
	}
	b := bytes.Clone(n.synced)
	for i := len(n.undo) - 1; i >= 0; i-- {
		copy(b[n.undo[i].off:], n.undo[i].old)
	}
	return b
}

// durableFull and full are the synced and the live bytes, trailing zeros
// included, in new memory.
func (n *memNode) durableFull() []byte {
	return append(bytes.Clone(n.durableData()), make([]byte, n.syncedZeros)...)
}

func (n *memNode) full() []byte { return append(bytes.Clone(n.data), make([]byte, n.zeros)...) }

// trimZeros moves data's trailing zeros to zeros.
func (n *memNode) trimZeros() {
	end := len(n.data)
	for end > 0 && n.data[end-1] == 0 {
		end--
	}
	n.zeros += int64(len(n.data) - end)
	n.data = n.data[:end]
}

// save keeps the bytes of [off, end) that synced can see before a write
// changes them in the shared array.
func (n *memNode) save(off, end int64) {
	end = min(end, int64(len(n.synced)))
	if !n.shared || off >= end {
		return
	}
	n.undo = append(n.undo, patch{off: off, old: bytes.Clone(n.synced[off:end])})
}

// detach gives synced back its own bytes once data has a new array, so
// that writes to data no longer need saving.
func (n *memNode) detach() {
	n.synced = n.durableData()
	n.shared, n.undo = false, nil
}

// resize truncates or zero-extends the live bytes; zeros take no memory.
func (n *memNode) resize(size int64) {
	if size <= int64(len(n.data)) {
		n.data, n.zeros = n.data[:size], 0
		return
	}
	n.zeros = size - int64(len(n.data))
}

// grow makes data hold the live bytes up to end, taking them from zeros.
func (n *memNode) grow(end int64) {
	old := int64(len(n.data))
	if end <= old {
		return
	}
	n.zeros = max(0, n.zeros-(end-old))
	if end > int64(cap(n.data)) {
		n.data = append(n.data, make([]byte, end-old)...)
		if n.shared {
			n.detach()
		}
		return
	}
	n.save(old, end)
	n.data = n.data[:end]
	clear(n.data[old:])
}

// writeAt writes p at off. Zeros past data only move the end of zeros.
func (n *memNode) writeAt(p []byte, off int64) {
	end := off + int64(len(p))
	if off >= int64(len(n.data)) && allZero(p) {
		n.zeros = max(n.zeros, end-int64(len(n.data)))
		return
	}
	n.grow(end)
	n.save(off, end)
	copy(n.data[off:], p)
}

func allZero(p []byte) bool {
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}

func (n *memNode) info(name string) os.FileInfo {
	return memInfo{name: filepath.Base(filepath.Join("/", name)), size: n.size(), mode: n.mode}
}

// memInfo is the os.FileInfo of a MemFS inode.
type memInfo struct {
	name string
	size int64
	mode os.FileMode
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() os.FileMode  { return i.mode }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.mode.IsDir() }
func (i memInfo) Sys() any           { return nil }

// memFile is an open MemFS file or directory. Its fields are guarded by
// fs.mu like the inode's, so a removed or renamed file stays readable and
// writable through handles opened before, as on POSIX.
type memFile struct {
	fs       *MemFS
	n        *memNode
	name     string
	pos      int64
	writable bool
	closed   bool
}

// check reports why the handle cannot do op, or nil. Callers hold fs.mu.
func (f *memFile) check(op string, write bool) error {
	switch {
	case f.closed:
		return pathErr(op, f.name, os.ErrClosed)
	case write && (!f.writable || f.n.dir):
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

// checkRead is check for reading bytes, which a directory has none of.
func (f *memFile) checkRead(op string) error {
	if err := f.check(op, false); err != nil {
		return err
	}
	if f.n.dir {
		return pathErr(op, f.name, syscall.EISDIR)
	}
	return nil
}

func (f *memFile) Read(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkRead("read"); err != nil {
		return 0, err
	}
	n, err := f.readAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

// ReadAt is safe for concurrent callers: it holds the read lock and does
// not move the file offset.
func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	if err := f.checkRead("readat"); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("readat", f.name, syscall.EINVAL)
	}
	return f.readAt(p, off)
}

func (f *memFile) readAt(p []byte, off int64) (int, error) {
	size := f.n.size()
	if off >= size {
		return 0, io.EOF
	}
	n := 0
	if off < int64(len(f.n.data)) {
		n = copy(p, f.n.data[off:])
	}
	if rest := p[n:min(int64(len(p)), size-off)]; len(rest) > 0 {
		clear(rest) // from the trailing zeros
		n += len(rest)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	f.n.writeAt(p, f.pos)
	f.pos += int64(len(p))
	return len(p), nil
}

// WriteAt writes at off, zero-filling any gap past the end, without
// moving the handle's offset.
func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("writeat", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("writeat", f.name, syscall.EINVAL)
	}
	f.n.writeAt(p, off)
	return len(p), nil
}

// Sync makes a file's bytes, or a directory's entries, durable.
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("sync", false); err != nil {
		return err
	}
	if f.n.dir {
		f.n.durable = maps.Clone(f.n.children)
		f.n.changed = nil
	} else {
		f.n.sync()
	}
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	if err := f.check("stat", false); err != nil {
		return nil, err
	}
	return f.n.info(f.name), nil
}

// Preallocate is a no-op: memory is not reserved ahead.
func (f *memFile) Preallocate(off, n int64) error {
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	return f.check("fallocate", false)
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", false); err != nil {
		return err
	}
	if !f.writable || f.n.dir || size < 0 {
		// ftruncate(2) answers EINVAL for a descriptor not open for writing.
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	f.n.resize(size)
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("close", false); err != nil {
		return err
	}
	f.closed = true
	return nil
}
