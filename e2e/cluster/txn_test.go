package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/e2e/eos"
	"kaas/internal/testwait"
	"kaas/registry"
)

// Exactly once across a cluster's kills: three consume-transform-produce members
// (franz-go's GroupTransactSession) copy a topic while the brokers are killed -9 one
// after the other and started again (every other kill while an EndTxn is in flight),
// then one is paused past its lease and resumed; `make chaos-cluster` (-cluster.long)
// runs 15 kills over 12,000 records. Each kill takes transaction coordinators, the
// group's coordinator and partition leaders with it; the broker that adopts an id reads
// the killed broker's journal (an open transaction keeps its deadline, a Prepare* is
// driven to its markers, sent broker to broker). Every transaction is all or nothing:
// read_committed output holds every input record once, the group's offsets end at the
// input's end, and no transaction is left hanging.

const (
	eosIn    = "eos-in"
	eosOut   = "eos-out"
	eosGroup = "eos"
)

func TestClusterEOSKill(t *testing.T) {
	n, kills := 3000, 3
	if *longFlag { // make chaos-cluster
		n, kills = 12000, 15
	}
	c := newCluster(t, false)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := testwait.Until(30*time.Second, 100*time.Millisecond, func() error {
		for _, tp := range []string{eosIn, eosOut} {
			resp, err := adm.CreateTopic(context.Background(), 6, 1, nil, tp)
			if err != nil {
				return err
			}
			if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
				return resp.Err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(eosIn))
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	}
	if err := prod.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatalf("produce input: %v", err)
	}
	prod.Close()

	l := eos.NewLedger()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// One transactional id coordinated by each broker.
	for b := int32(0); b < brokers; b++ {
		id := txnIDOf(b, "eos-m")
		m := eos.Member{Seeds: c.seeds(), TxnID: id, Tag: id, Group: eosGroup, In: eosIn, Out: eosOut,
			SessionTimeout: 8 * time.Second, RetryTimeout: 30 * time.Second}
		wg.Go(func() { m.Run(l, stop) })
	}
	defer func() {
		l.Stop()
		close(stop)
		wg.Wait()
	}()
	for k := 0; k < kills; k++ {
		// Every other kill aims at an EndTxn in flight.
		if !l.WaitFor(l.Commits()+3, k%2 == 0, time.Now().Add(90*time.Second)) {
			t.Fatalf("kill %d: the members committed nothing for 90 s (%d commits so far)", k, l.Commits())
		}
		victim := k % brokers
		c.procs[victim].Kill()
		c.start(victim)
	}
	// A pause past the lease: the others adopt what the paused broker held (its ids from
	// its journal); run again, it finds its lease lapsed, writes nothing of what it held,
	// and takes back what the view gives it.
	c.procs[1].Pause()
	if !l.WaitFor(l.Commits()+3, false, time.Now().Add(90*time.Second)) {
		c.procs[1].Resume()
		t.Fatalf("broker 1 paused: the members committed nothing for 90 s (%d commits so far)", l.Commits())
	}
	c.procs[1].Resume()

	inEnds, err := adm.ListEndOffsets(context.Background(), eosIn)
	if err != nil {
		t.Fatal(err)
	}
	if err := testwait.Until(180*time.Second, 200*time.Millisecond, func() error {
		fetched, err := adm.FetchOffsets(context.Background(), eosGroup)
		if err != nil {
			return err
		}
		var behind error
		inEnds.Each(func(o kadm.ListedOffset) {
			got, ok := fetched.Lookup(eosIn, o.Partition)
			if o.Offset > 0 && (!ok || got.At != o.Offset) {
				behind = fmt.Errorf("group offset of %s[%d] = %d, input's end %d", eosIn, o.Partition, got.At, o.Offset)
			}
		})
		return behind
	}); err != nil {
		t.Fatalf("pipeline did not finish (%d commits): %v", l.Commits(), err)
	}
	l.Stop()

	if err := testwait.Until(60*time.Second, 200*time.Millisecond, func() error {
		ends, err := adm.ListEndOffsets(context.Background(), eosOut)
		if err != nil {
			return err
		}
		stable, err := adm.ListCommittedOffsets(context.Background(), eosOut)
		if err != nil {
			return err
		}
		var hanging error
		ends.Each(func(o kadm.ListedOffset) {
			if s, _ := stable.Lookup(eosOut, o.Partition); s.Offset != o.Offset {
				hanging = fmt.Errorf("%s[%d]: last stable offset %d, end %d", eosOut, o.Partition, s.Offset, o.Offset)
			}
		})
		return hanging
	}); err != nil {
		t.Fatalf("a transaction is left hanging: %v", err)
	}

	rd, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumeTopics(eosOut),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := map[string]int{}
	total := 0
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(got) < n && ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[string(r.Key)]++; total++ })
	}
	var lost, twice []string
	for i := 0; i < n; i++ {
		switch k := strconv.Itoa(i); {
		case got[k] == 0:
			lost = append(lost, k)
		case got[k] > 1:
			twice = append(twice, k)
		}
	}
	if len(lost) > 0 || len(twice) > 0 {
		t.Fatalf("read_committed after %d kills: %d lost %v, %d twice %v", kills, len(lost), first10(lost), len(twice), first10(twice))
	}
	ends, err := adm.ListEndOffsets(context.Background(), eosOut)
	if err != nil {
		t.Fatal(err)
	}
	var endSum int64
	ends.Each(func(o kadm.ListedOffset) { endSum += o.Offset })
	t.Logf("%d kills and a pause, %d transactions committed, %d records read once (output log %d entries with markers and aborted records)",
		kills, l.Commits(), total, endSum)
}

// txnIDOf is a transactional id the cluster routes to broker b.
func txnIDOf(b int32, prefix string) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if registry.Hash(id)%brokers == uint32(b) {
			return id
		}
	}
}

func first10(s []string) []string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}
