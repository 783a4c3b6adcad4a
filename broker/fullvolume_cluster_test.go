package broker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"kaas/broker/brokertest"
	"kaas/internal/testwait"
	"kaas/storage"
)

// A broker of a cluster restarts on a full volume (no new file, no write of a temporary
// file under data.dir): it takes its lease and applies its view, as a broker alone
// starts. Before, its first lease write made a temporary file and the start failed with
// ENOSPC.
func TestClusterStartsOnAFullVolume(t *testing.T) {
	cfg := clusterConfigs(t, 1)[0]
	b := brokertest.StartWith(t, cfg)
	waitReady(t, b)
	adm := kadm.NewClient(mustClient(t, b.Addr()))
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	c := directClient(t, b.Addr())
	testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		if code := commitCode(t, c, "g", "orders", 42); code != 0 {
			return fmt.Errorf("commit never succeeded: code %d", code)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	var failedCreates atomic.Int64
	restore := storage.SetHook(func(op storage.Op, path string) error {
		if strings.HasPrefix(path, cfg.DataDir+string(filepath.Separator)) &&
			(op == storage.OpCreate || (op == storage.OpWrite && strings.HasSuffix(path, storage.TmpSuffix))) {
			failedCreates.Add(1)
			return syscall.ENOSPC
		}
		return nil
	})
	t.Cleanup(restore)
	again := brokertest.StartWith(t, cfg)
	waitReady(t, again) // the lease held and the ownership view applied
	if n := failedCreates.Load(); n == 0 {
		t.Fatal("the volume was never found full: the test tested nothing")
	}
}
