package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker/brokertest"
)

// The storage hook reaches a partition's own files: a produce's segment write and fsync,
// the recovery point written after that fsync and a fetch's segment read are each a fault
// site of the injector, so a seed fails and slows the data path as it does the journal.
func TestDiskSitesReachPartitionFiles(t *testing.T) {
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	in := New(1, Rates{DiskSlow: 1}, DiskSlow)
	defer in.Install(nil)()
	in.On()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for got := 0; got == 0; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record fetched: %v", err)
		}
		got = fs.NumRecords()
	}
	in.Off()
	fired := map[string]bool{}
	for _, f := range in.Schedule() {
		fired[f.Site] = true
	}
	for _, site := range []string{"disk/write/log", "disk/sync/log", "disk/write/recovery_point", "disk/read/log"} {
		if !fired[site] {
			t.Errorf("no fault at %s; fired: %v", site, fired)
		}
	}
}
