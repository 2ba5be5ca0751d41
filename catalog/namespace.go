package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/apache/iceberg-go"
	icecat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// namespaceProps reads a namespace's properties and its key's mod revision.
func (c *Etcd) namespaceProps(ctx context.Context, ns string) (iceberg.Properties, int64, error) {
	key := c.keys.namespace(ns)
	resp, err := c.get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, noSuchNamespace(ns)
	}
	props := iceberg.Properties{}
	if err := json.Unmarshal(resp.Kvs[0].Value, &props); err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	return props, resp.Kvs[0].ModRevision, nil
}

func encodeProps(p iceberg.Properties) string {
	if p == nil {
		p = iceberg.Properties{}
	}
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	return string(b)
}

// txn runs one guarded transaction and reports whether it applied.
func (c *Etcd) txn(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (bool, error) {
	rctx, cancel := c.rpc(ctx)
	defer cancel()
	resp, err := c.cli.Txn(rctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("catalog: transaction: %w", err)
	}
	return resp.Succeeded, nil
}

// CreateNamespace creates a namespace with properties.
func (c *Etcd) CreateNamespace(ctx context.Context, namespace table.Identifier, props iceberg.Properties) error {
	ns, err := splitNamespace(namespace)
	if err != nil {
		return err
	}
	key := c.keys.namespace(ns)
	ok, err := c.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, clientv3.OpPut(key, encodeProps(props)))
	if err == nil && !ok {
		err = fmt.Errorf("%w: %s", icecat.ErrNamespaceAlreadyExists, ns)
	}
	return err
}

// DropNamespace drops an empty namespace. CreateTable rewrites the
// namespace key in its transaction, so a table created after the emptiness
// check makes the drop fail instead of orphaning the table.
func (c *Etcd) DropNamespace(ctx context.Context, namespace table.Identifier) error {
	ns, err := splitNamespace(namespace)
	if err != nil {
		return err
	}
	_, rev, err := c.namespaceProps(ctx, ns)
	if err != nil {
		return err
	}
	names, err := c.listNames(ctx, c.keys.tables(ns))
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("%w: %s holds %d tables", icecat.ErrNamespaceNotEmpty, ns, len(names))
	}
	key := c.keys.namespace(ns)
	ok, err := c.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, clientv3.OpDelete(key))
	if err == nil && !ok {
		err = conflict("namespace " + ns + " changed while it was dropped")
	}
	return err
}

// CheckNamespaceExists reports whether the namespace exists.
func (c *Etcd) CheckNamespaceExists(ctx context.Context, namespace table.Identifier) (bool, error) {
	ns, err := splitNamespace(namespace)
	if err != nil {
		return false, err
	}
	resp, err := c.get(ctx, c.keys.namespace(ns))
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) > 0, nil
}

// ListNamespaces lists every namespace; namespaces have one level, so a
// namespace as parent has none below it.
func (c *Etcd) ListNamespaces(ctx context.Context, parent table.Identifier) ([]table.Identifier, error) {
	if len(parent) > 0 {
		ns, err := splitNamespace(parent)
		if err != nil {
			return nil, err
		}
		if _, _, err := c.namespaceProps(ctx, ns); err != nil {
			return nil, err
		}
		return []table.Identifier{}, nil
	}
	names, err := c.listNames(ctx, c.keys.namespaces())
	if err != nil {
		return nil, err
	}
	out := make([]table.Identifier, len(names))
	for i, n := range names {
		out[i] = table.Identifier{n}
	}
	return out, nil
}

// LoadNamespaceProperties returns a namespace's properties.
func (c *Etcd) LoadNamespaceProperties(ctx context.Context, namespace table.Identifier) (iceberg.Properties, error) {
	ns, err := splitNamespace(namespace)
	if err != nil {
		return nil, err
	}
	props, _, err := c.namespaceProps(ctx, ns)
	return props, err
}

// UpdateNamespaceProperties removes and sets properties, guarded by the
// namespace key's revision.
func (c *Etcd) UpdateNamespaceProperties(ctx context.Context, namespace table.Identifier,
	removals []string, updates iceberg.Properties) (icecat.PropertiesUpdateSummary, error) {
	var sum icecat.PropertiesUpdateSummary
	ns, err := splitNamespace(namespace)
	if err != nil {
		return sum, err
	}
	props, rev, err := c.namespaceProps(ctx, ns)
	if err != nil {
		return sum, err
	}
	next, sum, err := applyProps(props, removals, updates)
	if err != nil {
		return sum, err
	}
	key := c.keys.namespace(ns)
	ok, err := c.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, clientv3.OpPut(key, encodeProps(next)))
	if err == nil && !ok {
		err = conflict("namespace " + ns + " changed while its properties were updated")
	}
	return sum, err
}

func applyProps(props iceberg.Properties, removals []string, updates iceberg.Properties) (iceberg.Properties, icecat.PropertiesUpdateSummary, error) {
	sum := icecat.PropertiesUpdateSummary{Removed: []string{}, Updated: []string{}, Missing: []string{}}
	next := maps.Clone(props)
	for _, k := range removals {
		if _, both := updates[k]; both {
			return nil, sum, fmt.Errorf("catalog: property %q is both removed and updated", k)
		}
		if _, ok := next[k]; !ok {
			sum.Missing = append(sum.Missing, k)
			continue
		}
		delete(next, k)
		sum.Removed = append(sum.Removed, k)
	}
	for k, v := range updates {
		next[k] = v
		sum.Updated = append(sum.Updated, k)
	}
	return next, sum, nil
}
