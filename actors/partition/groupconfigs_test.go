package partition

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

func (h *harness) alterGroup(group string, ops ...ConfigOp) GroupConfigResult {
	h.t.Helper()
	r := request[*Created](h, func(p actor.Promise) any {
		return &AlterTopicConfigs{Groups: []TopicConfigChange{{Name: group, Ops: ops}}, Reply: p}
	})
	return r.Groups[0]
}

func (h *harness) groupConfigs(group string) map[string]string {
	h.t.Helper()
	return request[*Described](h, func(p actor.Promise) any { return &Describe{Groups: []string{group}, Reply: p} }).Groups[0]
}

// A group config change whose write fails is answered KAFKA_STORAGE_ERROR and changes
// nothing, on disk, shown or applied; the same change succeeds once the volume does,
// is published for the group actors and read back after a restart.
func TestGroupConfigWriteFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	h := newHarness(t, dir, func(c *Config) { c.FS = fsys })
	fsys.FailNext(storage.OpSync, nil)
	if r := h.alterGroup("g", setOp(GroupSessionTimeoutConfig, "50000")); r.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("alter under a failed fsync: %+v", r)
	}
	if c := h.groupConfigs("g"); len(c) != 0 {
		t.Fatalf("configs after the failed write: %v", c)
	}
	if s, _ := h.cfg.Catalog.ConsumerGroupTimes("g"); s != 0 {
		t.Fatalf("session %v published after the failed write", s)
	}
	if r := h.alterGroup("g", setOp(GroupSessionTimeoutConfig, "50000")); r.ErrorCode != 0 {
		t.Fatalf("alter after the failure: %+v", r)
	}
	if s, hb := h.cfg.Catalog.ConsumerGroupTimes("g"); s != 50*time.Second || hb != 0 {
		t.Fatalf("published %v %v, want 50s and unset", s, hb)
	}
	h.stop()
	h = newHarness(t, dir, nil)
	defer h.stop()
	if c := h.groupConfigs("g"); c[GroupSessionTimeoutConfig] != "50000" || len(c) != 1 {
		t.Fatalf("configs after a restart: %v", c)
	}
	if s, _ := h.cfg.Catalog.ConsumerGroupTimes("g"); s != 50*time.Second {
		t.Fatalf("published %v after a restart", s)
	}
}
