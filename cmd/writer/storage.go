package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

// StorageConfig is the storage: section (of the process, or of one table
// under tables:): the object store that holds the generations for
// everyone else (engine.Options.Store, publish.Options.Store). Its URL
// empty, generations stay in the data directory only.
//
// Credentials are never written into the configuration: access_key_file
// and secret_key_file name files that hold them (read once, at start);
// left out, the standard AWS chain applies (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, the shared config and credentials files, SSO,
// web identity, IMDS).
type StorageConfig struct {
	// URL is file:///abs/dir or s3://bucket/prefix.
	URL string `yaml:"url,omitempty"`
	// Endpoint is the S3 endpoint URL (http://127.0.0.1:7070); empty
	// means AWS's own, from the region.
	Endpoint string `yaml:"endpoint,omitempty"`
	// Region defaults to the standard chain's, then us-east-1.
	Region string `yaml:"region,omitempty"`
	// PathStyle addresses buckets as endpoint/bucket, as most
	// S3-compatible servers need.
	PathStyle bool `yaml:"path_style,omitempty"`
	// MaxAttempts bounds the attempts of each request; 0: objstore's
	// default (5).
	MaxAttempts int `yaml:"max_attempts,omitempty"`
	// PartSize: larger objects are uploaded in parts of this size; 0:
	// objstore's default (64 MiB); at least objstore.MinPartSize.
	PartSize      int64  `yaml:"part_size,omitempty"`
	AccessKeyFile string `yaml:"access_key_file,omitempty"`
	SecretKeyFile string `yaml:"secret_key_file,omitempty"`
}

// Bounds of the storage settings past which a value is a mistake.
const (
	maxStorageAttempts = 100
	maxPartSize        = 5 << 30 // S3's largest part
	maxKeyFileBytes    = 64 << 10
)

// storageFor is the storage of table t: its own storage: section when it
// has one (it replaces the process's whole: nothing is inherited key by
// key, so a table's endpoint never meets the process's keys), else the
// process's.
func (c *Config) storageFor(t TableConfig) StorageConfig {
	if t.Storage != nil {
		return *t.Storage
	}
	return c.Storage
}

// validateStorage checks the process's storage: section and each
// table's own.
func (c *Config) validateStorage() error {
	if err := c.Storage.validate("storage"); err != nil {
		return err
	}
	for i, t := range c.Tables {
		if t.Storage == nil {
			continue
		}
		if err := t.Storage.validate(fmt.Sprintf("tables[%d].storage", i)); err != nil {
			return err
		}
	}
	return nil
}

// validate checks the section whose key is key ("storage",
// "tables[1].storage"), as opening it would; the key files are read.
func (s StorageConfig) validate(key string) error {
	if s.URL == "" {
		return s.validateUnused(key)
	}
	u, err := parseStorageURL(s.URL)
	if err != nil {
		return badValue(key+".url", s.URL, "%v", err)
	}
	if u.Scheme == "file" {
		return s.validateFileOnly(key)
	}
	if err := checkEndpoint(s.Endpoint); err != nil {
		return badValue(key+".endpoint", s.Endpoint, "%v", err)
	}
	if strings.IndexFunc(s.Region, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return badValue(key+".region", s.Region, "must not hold spaces or control characters")
	}
	if err := s.validateNumbers(key); err != nil {
		return err
	}
	_, _, err = s.keys(key)
	return err
}

// storageSetting is one key of a storage: section other than url, and
// whether it is set.
type storageSetting struct {
	name string
	set  bool
	v    any
}

// settings are the section's keys other than url: the S3 settings.
func (s StorageConfig) settings() []storageSetting {
	return []storageSetting{{"endpoint", s.Endpoint != "", s.Endpoint}, {"region", s.Region != "", s.Region},
		{"path_style", s.PathStyle, s.PathStyle}, {"max_attempts", s.MaxAttempts != 0, s.MaxAttempts},
		{"part_size", s.PartSize != 0, s.PartSize}, {"access_key_file", s.AccessKeyFile != "", s.AccessKeyFile},
		{"secret_key_file", s.SecretKeyFile != "", s.SecretKeyFile}}
}

// validateUnused refuses settings of a section without a url, which
// nothing would use.
func (s StorageConfig) validateUnused(key string) error {
	for _, f := range s.settings() {
		if f.set {
			return badValue(key+"."+f.name, f.v, "is set but %s.url is empty: generations stay in the data directory", key)
		}
	}
	return nil
}

// validateFileOnly refuses the S3 settings on a file:// store.
func (s StorageConfig) validateFileOnly(key string) error {
	for _, f := range s.settings() {
		if f.set {
			return badValue(key+"."+f.name, f.v, "is an S3 setting, but %s.url %q is a file:// store", key, s.URL)
		}
	}
	return nil
}

func (s StorageConfig) validateNumbers(key string) error {
	switch {
	case s.MaxAttempts < 0:
		return badValue(key+".max_attempts", s.MaxAttempts, "must not be negative (0: the default, 5)")
	case s.MaxAttempts > maxStorageAttempts:
		return badValue(key+".max_attempts", s.MaxAttempts, "must be at most %d", maxStorageAttempts)
	case s.PartSize < 0:
		return badValue(key+".part_size", s.PartSize, "must not be negative (0: the default, 64 MiB)")
	case s.PartSize > 0 && s.PartSize < objstore.MinPartSize:
		return badValue(key+".part_size", s.PartSize, "must be at least %d (5 MiB, S3's smallest part)", objstore.MinPartSize)
	case s.PartSize > maxPartSize:
		return badValue(key+".part_size", s.PartSize, "must be at most %d (5 GiB, S3's largest part)", int64(maxPartSize))
	}
	return nil
}

var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// parseStorageURL checks a store URL as objstore.Open will take it, and
// the bucket name by S3's rules, which Open leaves to the first request.
func parseStorageURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return nil, fmt.Errorf("a store URL has no user, query or fragment: want file:///abs/dir or s3://bucket/prefix")
	}
	switch u.Scheme {
	case "file":
		if (u.Host != "" && u.Host != "localhost") || !strings.HasPrefix(u.Path, "/") {
			return nil, fmt.Errorf("file URLs name a local absolute path: want file:///abs/dir")
		}
		return u, nil
	case "s3":
		if err := checkBucket(u.Host); err != nil {
			return nil, err
		}
		if prefix := strings.Trim(u.Path, "/"); prefix != "" {
			if err := objstore.ValidateName(prefix); err != nil {
				return nil, fmt.Errorf("prefix: %w", err)
			}
		}
		return u, nil
	}
	return nil, fmt.Errorf("scheme %q: want file:///abs/dir or s3://bucket/prefix", u.Scheme)
}

// checkBucket applies S3's bucket naming rules: 3 to 63 lowercase
// letters, digits, dots and hyphens, a letter or digit at either end, no
// two dots side by side, not an IP address.
func checkBucket(b string) error {
	switch {
	case b == "":
		return fmt.Errorf("no bucket: want s3://bucket/prefix")
	case !bucketName.MatchString(b):
		return fmt.Errorf("bucket %q: want 3 to 63 lowercase letters, digits, dots and hyphens, beginning and ending with a letter or digit", b)
	case strings.Contains(b, ".."):
		return fmt.Errorf("bucket %q: two dots side by side", b)
	case net.ParseIP(b) != nil:
		return fmt.Errorf("bucket %q: a bucket is not named like an IP address", b)
	}
	return nil
}

// checkEndpoint accepts an empty endpoint (AWS's own) or an http(s) URL of
// a host, without user, query or fragment.
func checkEndpoint(e string) error {
	if e == "" {
		return nil
	}
	if !strings.Contains(e, "://") {
		return fmt.Errorf("want an http:// or https:// URL")
	}
	u, err := url.Parse(e)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("want an http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("no host: want http(s)://host:port")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("an endpoint has no user, query or fragment")
	}
	if p := u.Port(); p != "" {
		if err := checkAddress(net.JoinHostPort(u.Hostname(), p)); err != nil {
			return err
		}
	}
	return nil
}

// keys reads the access key and secret from their files: both or
// neither (the standard chain). Errors name the key.
func (s StorageConfig) keys(key string) (access, secret string, err error) {
	switch {
	case s.AccessKeyFile == "" && s.SecretKeyFile == "":
		return "", "", nil
	case s.SecretKeyFile == "":
		return "", "", badValue(key+".access_key_file", s.AccessKeyFile, "is set without %s.secret_key_file: set both or neither (the standard AWS chain)", key)
	case s.AccessKeyFile == "":
		return "", "", badValue(key+".secret_key_file", s.SecretKeyFile, "is set without %s.access_key_file: set both or neither (the standard AWS chain)", key)
	}
	if access, err = readKeyFile(s.AccessKeyFile); err != nil {
		return "", "", badValue(key+".access_key_file", s.AccessKeyFile, "%v", err)
	}
	if secret, err = readKeyFile(s.SecretKeyFile); err != nil {
		return "", "", badValue(key+".secret_key_file", s.SecretKeyFile, "%v", err)
	}
	return access, secret, nil
}

// readKeyFile reads one credential: the file's text without the
// whitespace around it, which must leave one non-empty line.
func readKeyFile(path string) (string, error) {
	b, err := vfs.ReadFile(vfs.Default, path)
	switch {
	case err != nil:
		return "", err
	case len(b) > maxKeyFileBytes:
		return "", fmt.Errorf("%d bytes: not a key file (at most %d)", len(b), maxKeyFileBytes)
	}
	k := strings.TrimSpace(string(b))
	switch {
	case k == "":
		return "", fmt.Errorf("the file is empty")
	case strings.ContainsAny(k, "\r\n"):
		return "", fmt.Errorf("the file holds more than one line: want the key alone")
	}
	return k, nil
}

// options are objstore.Open's options for the section; key names it in
// errors.
func (s StorageConfig) options(key string) (objstore.Options, error) {
	access, secret, err := s.keys(key)
	if err != nil {
		return objstore.Options{}, err
	}
	return objstore.Options{Endpoint: s.Endpoint, Region: s.Region, PathStyle: s.PathStyle, MaxAttempts: s.MaxAttempts,
		PartSize: s.PartSize, AccessKey: access, SecretKey: secret}, nil
}

// stores opens each distinct storage configuration once, and hands the
// same Store to every table that has it. Safe for concurrent use (the
// tables of merge --every open theirs side by side).
type stores struct {
	reg prometheus.Registerer // nil: no metrics
	log *slog.Logger

	mu     sync.Mutex
	opened map[StorageConfig]objstore.Store
}

func newStores(reg prometheus.Registerer, log *slog.Logger) *stores {
	return &stores{reg: reg, log: log, opened: map[StorageConfig]objstore.Store{}}
}

// open returns the store of s (nil when its url is empty), opening it on
// first use. key names the section in errors. The store's metrics carry
// the label store=<its URL>: a store shared by several tables cannot
// count per table.
func (ss *stores) open(ctx context.Context, key string, s StorageConfig) (objstore.Store, error) {
	if s.URL == "" {
		return nil, nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if st, ok := ss.opened[s]; ok {
		return st, nil
	}
	o, err := s.options(key)
	if err != nil {
		return nil, err
	}
	if ss.reg != nil {
		o.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"store": s.URL}, ss.reg)
	}
	o.Logger = ss.log.With("store", s.URL)
	st, err := objstore.Open(ctx, s.URL, o)
	if err != nil {
		return nil, fmt.Errorf("%s.url %q: %w", key, s.URL, err)
	}
	ss.opened[s] = st
	ss.log.Info("object store open", "store", st.String(), "endpoint", s.Endpoint, "region", s.Region,
		"path_style", s.PathStyle, "credentials", credentialSource(s))
	return st, nil
}

// credentialSource says where the credentials come from, for the log.
func credentialSource(s StorageConfig) string {
	switch {
	case strings.HasPrefix(s.URL, "file:"):
		return "none"
	case s.AccessKeyFile != "":
		return "files"
	}
	return "standard chain"
}

// storageKey names a table's storage section in errors.
func (c *Config) storageKey(t TableConfig) string {
	for i, ct := range c.Tables {
		if ct.Name == t.Name && ct.Storage != nil {
			return fmt.Sprintf("tables[%d].storage", i)
		}
	}
	return "storage"
}

func init() {
	sections["main.StorageConfig"] = "storage"
}

// storageChoice is a table's storage section and its key, for merge.
type storageChoice struct {
	key string
	cfg StorageConfig
}
