package broker

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"kaas/storage"
)

// loadClusterID reads the cluster id kept in the data dir, creating it on first start
// (22 characters of URL-safe base64 of 16 random bytes, as Kafka's are). Brokers started
// together each propose an id; the first made wins and all read it (writeOnce).
func loadClusterID(fsys storage.FS, dir string) (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", fmt.Errorf("new cluster id: %w", err)
	}
	// Clients cache the id: one that might not survive a crash must not be served.
	raw, err := writeOnce(fsys, dir, "cluster.id", []byte(base64.RawURLEncoding.EncodeToString(u[:])+"\n"))
	if err != nil {
		return "", fmt.Errorf("write cluster id: %w", err)
	}
	id := strings.TrimSpace(string(raw))
	if id == "" {
		return "", fmt.Errorf("cluster id file %s is empty", filepath.Join(dir, "cluster.id"))
	}
	return id, nil
}

// writeOnce makes data the content of dir/name unless it already has one, and returns
// the content in force, durable: the file of whichever writer came first. Each writer
// writes and fsyncs a temporary file of its own (a random suffix), then link(2)s it to
// name: a link fails with EEXIST when name exists, on a local filesystem and on NFS
// alike, so the first wins atomically and no writer's rename can take another's file
// away (a shared temporary name did: "rename cluster.id.tmp: no such file or
// directory"). An existing file is read, not written: a start on a full volume needs
// no free space. The directory is fsynced on every path, so a content another writer
// has just linked is durable before it is served.
func writeOnce(fsys storage.FS, dir, name string, data []byte) ([]byte, error) {
	path := filepath.Join(dir, name)
	raw, err := fsys.ReadFile(path)
	if err == nil {
		if err := fsys.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("fsync directory %s: %w", dir, err)
		}
		return raw, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	tmp := path + "." + hex.EncodeToString(r[:]) + storage.TmpSuffix
	defer func() { _ = fsys.Remove(tmp) }()
	if err := writeSynced(fsys, tmp, data); err != nil {
		return nil, err
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("link %s: %w", path, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return nil, fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	raw, err = fsys.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return raw, nil
}

// writeSynced writes data to a new file at path and fsyncs it.
func writeSynced(fsys storage.FS, path string, data []byte) error {
	f, err := fsys.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		err = fmt.Errorf("write %s: %w", path, err)
	} else if err = f.Sync(); err != nil {
		err = fmt.Errorf("fsync %s: %w", path, err)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", path, cerr)
	}
	return err
}

// ErrClusterSize is the error of a broker started with another cluster size than the
// one its data directory's cluster was made with.
var ErrClusterSize = errors.New("cluster size differs from the data directory's")

// clusterSizeName is the file, beside cluster.id, that keeps the size of a static
// cluster: every broker hashes groups and partitions over it, so one started with
// another peer list would route keys its peers route elsewhere.
const clusterSizeName = "cluster.size"

// checkClusterSize refuses size when the data dir already records another (read only:
// a refused broker takes no lease its peers would watch).
func checkClusterSize(fsys storage.FS, dir string, size int) error {
	raw, err := fsys.ReadFile(filepath.Join(dir, clusterSizeName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read cluster size: %w", err)
	}
	return sameClusterSize(raw, dir, size)
}

// recordClusterSize records size on the first start (brokers started together: the
// first written wins, writeOnce) and refuses a size other than the one recorded.
func recordClusterSize(fsys storage.FS, dir string, size int) error {
	raw, err := writeOnce(fsys, dir, clusterSizeName, []byte(strconv.Itoa(size)+"\n"))
	if err != nil {
		return fmt.Errorf("write cluster size: %w", err)
	}
	return sameClusterSize(raw, dir, size)
}

// sameClusterSize compares the content of the size file with size. An unreadable file
// refuses the start: it keeps the size in force, whatever it was.
func sameClusterSize(raw []byte, dir string, size int) error {
	path := filepath.Join(dir, clusterSizeName)
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || n < 1 {
		return fmt.Errorf("cluster size file %s holds %q, not a size: write the cluster's size (its broker count) into it", path, bytes.TrimSpace(raw))
	}
	if n != size {
		return fmt.Errorf("%w: cluster.size %d, but the cluster of this data directory has %d brokers (%s): start every broker with cluster.size=%d and the same peer list; to resize the cluster, write the new size into that file first, then restart the brokers with it",
			ErrClusterSize, size, n, path, n)
	}
	return nil
}
