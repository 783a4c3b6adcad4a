package partition

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"kaas/storage"
)

// topicMeta is a topic's catalogue entry, kept in <data>/topics/<topic>/topic.json.
// Replication factor is recorded as asked: durability comes from the shared volume, not
// from replicas.
type topicMeta struct {
	Version           int               `json:"version"`
	Name              string            `json:"name"`
	ID                string            `json:"id"`
	Partitions        int32             `json:"partitions"`
	ReplicationFactor int16             `json:"replication_factor"`
	LeaderEpochs      []int32           `json:"leader_epochs"`
	Configs           map[string]string `json:"configs,omitempty"`
}

const (
	metaFile = "topic.json"
	// deletedSuffix marks a deleted topic's directory until it is removed. '~' is not a
	// topic name character, so it never collides with a live topic.
	deletedSuffix = ".deleted"
	// producerIDFile holds the next block of producer ids (outside any topic's name space).
	producerIDFile = "~producer-ids.json"
	// producerIDBlock is how many ids are reserved per file write.
	producerIDBlock = 1000
)

func topicsDir(dataDir string) string { return filepath.Join(dataDir, "topics") }

func (m *topicMeta) id() [16]byte {
	u, _ := uuid.Parse(m.ID)
	return u
}

func partitionDir(root, topic string, p int32) string {
	return filepath.Join(root, topic, strconv.Itoa(int(p)))
}

// saveMeta writes a topic's catalogue entry, creating its partition directories first so
// that a topic.json on disk always names partitions that exist.
func saveMeta(fsys storage.FS, root string, m *topicMeta) error {
	dir := filepath.Join(root, m.Name)
	for p := int32(0); p < m.Partitions; p++ {
		if err := fsys.MkdirAll(partitionDir(root, m.Name, p)); err != nil {
			return fmt.Errorf("create partition dir: %w", err)
		}
	}
	if err := fsys.SyncDir(root); err != nil {
		return fmt.Errorf("fsync directory %s: %w", root, err)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.Name, err)
	}
	return storage.WriteFileAtomic(fsys, dir, metaFile, data)
}

// producerIDFileOf is broker id's producer id block file in a cluster.
func producerIDFileOf(id int32) string { return "~producer-ids-" + strconv.Itoa(int(id)) + ".json" }

// readCatalog reads every topic under root and changes nothing (a broker that does not
// write the catalogue): half-made and deleted topics are skipped.
func readCatalog(fsys storage.FS, root string) ([]*topicMeta, []error) {
	return scanCatalog(fsys, root, false)
}

// loadCatalog reads every topic under root and removes what deletions left behind.
func loadCatalog(fsys storage.FS, root string) ([]*topicMeta, []error) {
	if err := fsys.MkdirAll(root); err != nil {
		return nil, []error{fmt.Errorf("create %s: %w", root, err)}
	}
	return scanCatalog(fsys, root, true)
}

// scanCatalog reads every topic.json under root; clean removes deleted topics not yet
// removed and creations that crashed before their catalogue entry was written.
func scanCatalog(fsys storage.FS, root string, clean bool) ([]*topicMeta, []error) {
	entries, err := fsys.ReadDir(root)
	if err != nil {
		return nil, []error{fmt.Errorf("list %s: %w", root, err)}
	}
	var out []*topicMeta
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() {
			continue
		}
		if strings.Contains(name, "~") { // a deleted topic not yet removed
			if clean {
				_ = fsys.RemoveAll(filepath.Join(root, name))
			}
			continue
		}
		data, err := fsys.ReadFile(filepath.Join(root, name, metaFile))
		if errors.Is(err, fs.ErrNotExist) {
			// A creation that crashed before its catalogue entry was written (or, read by
			// a broker that does not write the catalogue, one being made now).
			if clean {
				_ = fsys.RemoveAll(filepath.Join(root, name))
			}
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read topic %s: %w", name, err))
			continue
		}
		var m topicMeta
		if err := json.Unmarshal(data, &m); err != nil || m.Name != name || m.Partitions < 1 {
			errs = append(errs, fmt.Errorf("topic %s: corrupt %s: %v", name, metaFile, err))
			continue
		}
		for int32(len(m.LeaderEpochs)) < m.Partitions {
			m.LeaderEpochs = append(m.LeaderEpochs, 0)
		}
		out = append(out, &m)
	}
	return out, errs
}

// deleteTopicDir moves a topic's directory aside at once (so a topic of the same name can
// be created right away) and returns where it went, for removal in the background.
func deleteTopicDir(fsys storage.FS, root, name string) (string, error) {
	aside := filepath.Join(root, name+"~"+uuid.NewString()+deletedSuffix)
	if err := storage.RenameDurably(fsys, root, filepath.Join(root, name), aside); err != nil {
		return "", fmt.Errorf("delete topic %s: %w", name, err)
	}
	return aside, nil
}

type producerIDState struct {
	Next int64 `json:"next"`
}

// reserveProducerIDs persists that ids below next+block are taken and returns next: ids
// stay unique across restarts, at one file write per block.
func reserveProducerIDs(fsys storage.FS, root, name string) (int64, error) {
	path := filepath.Join(root, name)
	var st producerIDState
	data, err := fsys.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &st); err != nil {
			return 0, fmt.Errorf("corrupt %s: %w", path, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	next := st.Next
	st.Next += producerIDBlock
	out, _ := json.Marshal(st)
	if err := storage.WriteFileAtomic(fsys, root, producerIDFile, out); err != nil {
		return 0, err
	}
	return next, nil
}
