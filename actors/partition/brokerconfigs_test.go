package partition

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/storage"
)

func (h *harness) alterBroker(resource string, ops ...ConfigOp) TopicInfo {
	h.t.Helper()
	c := request[*Created](h, func(p actor.Promise) any {
		return &AlterTopicConfigs{Topics: []TopicConfigChange{{Broker: true, Name: resource, Ops: ops}}, Reply: p}
	})
	return c.Topics[0]
}

// A change of the dynamic broker configs is on disk before it is answered and applied: a
// failed fsync answers KAFKA_STORAGE_ERROR and leaves the defaults in force and nothing
// under topics/; the same change succeeds once the volume does, and a manager started
// again on the directory has it.
func TestBrokerConfigsWriteFailure(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	h := newHarness(t, dir, func(c *Config) { c.FS = fsys })
	set := setOp("log.retention.ms", "60000")

	fsys.FailNext(storage.OpSync, nil)
	if ti := h.alterBroker("", set); ti.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("under a failed fsync: %+v, want KAFKA_STORAGE_ERROR", ti)
	}
	if b := h.cfg.Catalog.BrokerConfigs(); len(b.Scope("")) != 0 {
		t.Fatalf("a change not written was applied: %+v", b)
	}
	assertOnly(t, topicsDir(dir))

	if ti := h.alterBroker("", set); ti.ErrorCode != 0 {
		t.Fatalf("after the failure: %+v", ti)
	}
	if v := h.cfg.Catalog.BrokerConfigs().Scope("")["log.retention.ms"]; v != "60000" {
		t.Fatalf("published %q", v)
	}
	assertOnly(t, topicsDir(dir), brokerConfigFile)
	if ti := h.alterBroker("x", set); ti.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("a broker resource named x: %+v, want INVALID_REQUEST", ti)
	}
	h.stop()

	h = newHarness(t, dir, nil)
	defer h.stop()
	if v := h.cfg.Catalog.BrokerConfigs().Scope("")["log.retention.ms"]; v != "60000" {
		t.Fatalf("after a restart: %q", v)
	}
	del := ConfigOp{Name: "log.retention.ms", Op: int8(kmsg.IncrementalAlterConfigOpDelete)}
	if ti := h.alterBroker("", del); ti.ErrorCode != 0 {
		t.Fatalf("delete: %+v", ti)
	}
	if b := h.cfg.Catalog.BrokerConfigs(); len(b.Scope("")) != 0 {
		t.Fatalf("after the delete: %+v", b)
	}
}

// Dynamic broker configs that cannot be read at start are never overwritten unread: a
// change is refused with KAFKA_STORAGE_ERROR and the file is left as it is.
func TestBrokerConfigsUnreadNotOverwritten(t *testing.T) {
	dir := t.TempDir()
	root := topicsDir(dir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, brokerConfigFile)
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, dir, nil)
	defer h.stop()
	if ti := h.alterBroker("", setOp("log.retention.ms", "60000")); ti.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("over an unreadable file: %+v, want KAFKA_STORAGE_ERROR", ti)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "{not json" {
		t.Fatalf("the unreadable file was replaced: %q %v", data, err)
	}
}
