package catalog

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/rollwal/rollwal/layout"
)

// Table metadata files follow the Iceberg convention, under the table's
// location:
//
//	<location>/metadata/<version %05d>-<uuid>.metadata.json
//
// version is the previous file's plus one (0 at create). The uuid makes the
// name unique to the attempt, so two attempts at the same version never
// write the same file and a failed attempt leaves only garbage that no
// record names. The directory is layout.MetadataRel, where the base's
// orphan removal looks for them.
var metadataName = regexp.MustCompile(`^(\d{5,})-([0-9a-f-]{36})\.metadata\.json$`)

// metadataLocation returns a new, attempt-unique location for version.
func metadataLocation(tableLoc string, version int) string {
	return strings.TrimSuffix(tableLoc, "/") + "/" + layout.MetadataRel + fmt.Sprintf("%05d-%s.metadata.json", version, uuid.NewString())
}

// parseMetadataVersion returns the version in a metadata location's name.
func parseMetadataVersion(loc string) (int, error) {
	m := metadataName.FindStringSubmatch(path.Base(loc))
	if m == nil {
		return 0, fmt.Errorf("%w: metadata location %q is not <version>-<uuid>.metadata.json", ErrCorrupt, loc)
	}
	if _, err := uuid.Parse(m[2]); err != nil {
		return 0, fmt.Errorf("%w: metadata location %q: %v", ErrCorrupt, loc, err)
	}
	v, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, fmt.Errorf("%w: metadata location %q: %v", ErrCorrupt, loc, err)
	}
	return v, nil
}

// writeMetadata writes meta as JSON to loc, durably.
// encodeMetadata is the metadata's JSON. Its own MarshalJSON, called
// directly: through json.Marshal its output is checked and compacted once
// more, a pass over every snapshot kept (a tenth of a base commit's CPU
// with 200 of them).
func encodeMetadata(meta table.Metadata) ([]byte, error) {
	if m, ok := meta.(json.Marshaler); ok {
		return m.MarshalJSON()
	}
	return json.Marshal(meta)
}

// sidecarFunc is BaseCommit.Sidecar.
type sidecarFunc func(loc string, meta table.Metadata) (string, []byte, error)

func (c *Etcd) writeMetadata(meta table.Metadata, loc string, sidecar sidecarFunc) error {
	data, err := encodeMetadata(meta)
	if err != nil {
		return fmt.Errorf("catalog: encode metadata: %w", err)
	}
	if err := c.io.WriteFile(loc, data); err != nil {
		return fmt.Errorf("catalog: write metadata %s: %w", loc, err)
	}
	if fio, ok := c.io.(fileIO); ok && sidecar != nil {
		path, data, err := sidecar(loc, meta)
		if err == nil {
			err = fio.writeTemp(path, data)
		}
		if err != nil {
			return fmt.Errorf("catalog: sidecar of %s: %w", loc, err)
		}
	}
	// The metadata file is the last file of a create or a commit: after
	// this, every file it reaches is durable.
	if err := c.io.syncDirty(); err != nil {
		return err
	}
	c.cacheMu.Lock()
	c.remember(loc, meta)
	c.cacheMu.Unlock()
	return nil
}
