package broker_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/storage"
)

// TestDeletedGroupNotListedAfterWriteBehindStart: a broker alone restarts with a group's
// file behind its journal (the start leaves it to be written later and lists the group
// from what the replay left); the group is then deleted. From the moment its actor has
// stopped, ListGroups must not show it again, even while the journal is slow to take
// in that the file is gone (its segment's removal held here): ListGroups
// after a DeleteGroups showed the deleted group, Stable, in the client matrix.
func TestDeletedGroupNotListedAfterWriteBehindStart(t *testing.T) {
	c := brokertest.Config(t)
	c.OffsetsCheckpointInterval = time.Hour // the file stays behind the journal
	b := brokertest.StartWith(t, c)
	createTopic(t, b.Addr(), "wb", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "wb", Partition: 0, At: 0, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "wb-group", offs); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 0}}
	b = brokertest.StartWith(t, c)
	cl, err = kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm = kadm.NewClient(cl)
	listed := func() bool {
		l, err := adm.ListGroups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := l["wb-group"]
		return ok
	}
	if !listed() {
		t.Fatal("wb-group not listed after the restart")
	}
	// The journal's removal of the replayed segments is held (not slept on) until the
	// listings below are done: until then the journal has not taken in the checkpoint.
	jdir := filepath.Join(c.DataDir, "__cluster")
	held, release := make(chan struct{}, 1), make(chan struct{})
	restore := storage.SetHook(func(op storage.Op, path string) error {
		if op == storage.OpRemove && strings.HasPrefix(path, jdir) && strings.Contains(path, "journal") {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	})
	defer restore()
	defer close(release)
	resp, err := adm.DeleteGroups(ctx, "wb-group")
	if err != nil || resp["wb-group"].Err != nil {
		t.Fatalf("delete: %v %v", err, resp["wb-group"].Err)
	}
	select {
	case <-held: // the group's checkpoint reached the journal, which is held there
	case <-ctx.Done():
		t.Fatal("the journal never removed the replayed segments")
	}
	for range 200 {
		if listed() {
			t.Fatal("wb-group listed again after its deletion")
		}
	}
}
