package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// MkdirAllDurable creates dir and any missing parents, and syncs the parent
// of each directory it creates, so the whole path survives a crash. MkdirAll
// alone leaves new directory entries volatile until their parents are
// synced.
func MkdirAllDurable(fs FS, dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if _, err := fs.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAllDurable(fs, parent, perm); err != nil {
			return err
		}
	}
	if err := fs.MkdirAll(dir, perm); err != nil {
		return err
	}
	return SyncDir(fs, parent)
}

// SyncDir makes the entries of dir durable.
func SyncDir(fs FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("vfs: sync directory %s: %w", dir, err)
	}
	return nil
}

// ReadFile returns the whole content of the named file.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
