package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// AssignmentFile is the name of the explicit assignments under <data.dir>/__cluster.
const AssignmentFile = "assignment.json"

// Assignment is the content of assignment.json: explicit owners that win over the hash.
//
//	{"version":1,
//	 "consumerGroups":[{"group":"orders-app","broker":1}],
//	 "transactionalIds":[{"id":"payments-1","broker":2}],
//	 "partitions":[{"topic":"orders","partition":0,"broker":2}]}
//
// An entry names the broker that owns the key while that broker is alive; while it is
// not, the key falls back into the alive subset as a hashed key does. Unknown fields,
// duplicate keys and brokers outside the cluster are refused (the previous assignment
// stays in force, and the refusal is logged).
type Assignment struct {
	Version          int              `json:"version"`
	ConsumerGroups   []GroupEntry     `json:"consumerGroups,omitempty"`
	TransactionalIDs []TxnEntry       `json:"transactionalIds,omitempty"`
	Partitions       []PartitionEntry `json:"partitions,omitempty"`
	groups           map[string]int32 `json:"-"`
	txns             map[string]int32 `json:"-"`
	parts            map[tpKey]int32  `json:"-"`
	digest           string           `json:"-"`
}

// GroupEntry assigns a consumer group's coordinator.
type GroupEntry struct {
	Group  string `json:"group"`
	Broker int32  `json:"broker"`
}

// TxnEntry assigns a transactional id's coordinator.
type TxnEntry struct {
	ID     string `json:"id"`
	Broker int32  `json:"broker"`
}

// PartitionEntry assigns a partition's leader.
type PartitionEntry struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Broker    int32  `json:"broker"`
}

type tpKey struct {
	topic string
	p     int32
}

// ParseAssignment decodes and checks assignment.json for a cluster of size brokers.
func ParseAssignment(raw []byte, size int) (*Assignment, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var a Assignment
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the object")
	}
	if a.Version != 1 {
		return nil, fmt.Errorf("version %d, want 1", a.Version)
	}
	check := func(what string, b int32) error {
		if b < 0 || (size > 0 && int(b) >= size) {
			return fmt.Errorf("%s: broker %d is outside the cluster (size %d)", what, b, size)
		}
		return nil
	}
	a.groups = map[string]int32{}
	for _, e := range a.ConsumerGroups {
		if _, dup := a.groups[e.Group]; dup {
			return nil, fmt.Errorf("consumerGroups: group %q twice", e.Group)
		}
		if err := check("consumerGroups", e.Broker); err != nil {
			return nil, err
		}
		a.groups[e.Group] = e.Broker
	}
	a.txns = map[string]int32{}
	for _, e := range a.TransactionalIDs {
		if _, dup := a.txns[e.ID]; dup {
			return nil, fmt.Errorf("transactionalIds: id %q twice", e.ID)
		}
		if err := check("transactionalIds", e.Broker); err != nil {
			return nil, err
		}
		a.txns[e.ID] = e.Broker
	}
	a.parts = map[tpKey]int32{}
	for _, e := range a.Partitions {
		k := tpKey{e.Topic, e.Partition}
		if e.Partition < 0 {
			return nil, fmt.Errorf("partitions: %s partition %d is negative", e.Topic, e.Partition)
		}
		if _, dup := a.parts[k]; dup {
			return nil, fmt.Errorf("partitions: %s/%d twice", e.Topic, e.Partition)
		}
		if err := check("partitions", e.Broker); err != nil {
			return nil, err
		}
		a.parts[k] = e.Broker
	}
	sum := sha256.Sum256(raw)
	a.digest = hex.EncodeToString(sum[:8])
	return &a, nil
}

func (a *Assignment) group(g string) (int32, bool) {
	if a == nil {
		return 0, false
	}
	b, ok := a.groups[g]
	return b, ok
}

func (a *Assignment) txn(t string) (int32, bool) {
	if a == nil {
		return 0, false
	}
	b, ok := a.txns[t]
	return b, ok
}

func (a *Assignment) partition(t string, p int32) (int32, bool) {
	if a == nil {
		return 0, false
	}
	b, ok := a.parts[tpKey{t, p}]
	return b, ok
}

// WatchAssignment reads path into r now and whenever its modification time or size
// changes (checked every interval) until ctx ends. A missing file is no assignment; a
// file that does not parse is logged and the previous assignment stays.
func WatchAssignment(ctx context.Context, r *Registry, path string, interval time.Duration, log zerolog.Logger) {
	var lastMod time.Time
	lastSize := int64(-1)
	load := func() {
		st, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			if lastSize != -1 {
				r.SetAssignment(nil)
				log.Info().Str("path", path).Msg("assignment_removed")
			}
			lastSize = -1
			return
		}
		if err != nil {
			log.Warn().Err(err).Str("path", path).Msg("assignment_unreadable")
			return
		}
		if st.ModTime().Equal(lastMod) && st.Size() == lastSize {
			return
		}
		lastMod, lastSize = st.ModTime(), st.Size()
		raw, err := os.ReadFile(path)
		if err != nil {
			log.Warn().Err(err).Str("path", path).Msg("assignment_unreadable")
			return
		}
		a, err := ParseAssignment(raw, r.Size())
		if err != nil {
			log.Error().Err(err).Str("path", path).Msg("assignment_refused")
			return
		}
		r.SetAssignment(a)
		log.Info().Str("path", path).Int("groups", len(a.ConsumerGroups)).
			Int("transactional_ids", len(a.TransactionalIDs)).Int("partitions", len(a.Partitions)).
			Msg("assignment_loaded")
	}
	load()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			load()
		}
	}
}

// Digest identifies an assignment's content ("" for none), so brokers can tell whether
// they route by the same one.
func (a *Assignment) Digest() string {
	if a == nil {
		return ""
	}
	return a.digest
}
