package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// A topic created with cleanup.policy=compact: keyed records overwritten over many
// segments are compacted on the retention tick, and a consumer from the start sees the
// newest value of each key once; a record without a key is refused.
func TestCompactedTopicWire(t *testing.T) { compactedTopic(t, false) }

// A topic altered to cleanup.policy=compact after its records were written is compacted
// by its running partition, without a restart (IncrementalAlterConfigs through kadm).
func TestTopicAlteredToCompactWire(t *testing.T) { compactedTopic(t, true) }

func compactedTopic(t *testing.T, alterLater bool) {
	c := brokertest.Config(t)
	c.LogRetentionCheck = 20 * time.Millisecond
	b := brokertest.StartWith(t, c)
	cl := mustClient(t, b.Addr())
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	policy := "compact"
	if alterLater {
		policy = "delete"
	}
	r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy":            kmsg.StringPtr(policy),
		"segment.bytes":             kmsg.StringPtr("300"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0.01"),
	}, "cmp")
	if err != nil || r.Err != nil {
		t.Fatalf("create: %v %v", err, r.Err)
	}
	produce := func(key, value []byte) error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "cmp", Key: key, Value: value}).FirstErr()
	}
	const keys, rounds = 5, 6
	for round := 0; round < rounds; round++ {
		for k := 0; k < keys; k++ {
			if err := produce([]byte(fmt.Sprint("k", k)), []byte(fmt.Sprint("v", round))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Enough after them that the newest values leave the active segment.
	for i := 0; i < 8; i++ {
		if err := produce([]byte("filler"), []byte(fmt.Sprint("f", i))); err != nil {
			t.Fatal(err)
		}
	}
	if alterLater {
		res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: kmsg.StringPtr("compact")}}, "cmp")
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("alter to compact: %v", err)
		}
	}
	if err := produce(nil, []byte("no key")); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("record without a key: %v, want INVALID_RECORD", err)
	}
	produced := int64(keys*rounds + 8)

	testwait.For(t, 20*time.Second, 100*time.Millisecond, func() error {
		recs, err := consumeAll(ctx, b.Addr(), "cmp", produced)
		if err != nil {
			return err
		}
		seen := map[string][]string{}
		last := int64(-1)
		for _, r := range recs {
			if r.Offset <= last {
				return fmt.Errorf("offset %d after %d", r.Offset, last)
			}
			last = r.Offset
			seen[string(r.Key)] = append(seen[string(r.Key)], string(r.Value))
		}
		for k := 0; k < keys; k++ {
			want := []string{fmt.Sprint("v", rounds-1)}
			if got := seen[fmt.Sprint("k", k)]; fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("key k%d: values %v, want %v (of %d records)", k, got, want, len(recs))
			}
		}
		if f := seen["filler"]; len(f) == 0 || f[len(f)-1] != "f7" {
			return fmt.Errorf("filler values %v", f)
		}
		return nil
	})
}

// consumeAll reads topic's partition 0 from the start up to offset end (exclusive).
func consumeAll(ctx context.Context, addr, topic string, end int64) ([]*kgo.Record, error) {
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {0: kgo.NewOffset().AtStart()},
	}))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []*kgo.Record
	for {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("poll: %w", err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			done = done || r.Offset >= end-1
		})
		if done {
			return out, nil
		}
	}
}

// TestCompactedTransactionalTopicWire: a compacted topic written by franz-go's
// transactional producer (as an exactly-once Kafka Streams changelog is) is compacted as
// Apache compacts it: a committed transaction's values replace older ones and are
// replaced by newer ones, an aborted transaction's values are dropped, so even a
// read_uncommitted reader from the start sees only each key's newest committed value;
// a read_committed reader sees the same.
func TestCompactedTransactionalTopicWire(t *testing.T) {
	c := brokertest.Config(t)
	c.LogRetentionCheck = 20 * time.Millisecond
	b := brokertest.StartWith(t, c)
	cl := mustClient(t, b.Addr())
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy":            kmsg.StringPtr("compact"),
		"segment.bytes":             kmsg.StringPtr("400"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0.01"),
	}, "changelog")
	if err != nil || r.Err != nil {
		t.Fatalf("create: %v %v", err, r.Err)
	}
	p, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("changelog-writer"),
		kgo.DefaultProduceTopic("changelog"), kgo.TransactionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const keys = 4
	commits := []bool{true, true, true, false, true, false} // round 4 is the newest committed
	for round, commit := range commits {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < keys; k++ {
			rec := &kgo.Record{Key: []byte(fmt.Sprint("k", k)), Value: []byte(fmt.Sprint("v", round))}
			if err := p.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("round %d end (commit %v): %v", round, commit, err)
		}
	}
	// Enough after them that every transaction leaves the active segment.
	for i := 0; i < 8; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "changelog", Key: []byte("filler"), Value: []byte(fmt.Sprint("f", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, "changelog")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("changelog", 0)
	read := func(level kgo.IsolationLevel) (map[string][]string, error) {
		cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.FetchIsolationLevel(level),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"changelog": {0: kgo.NewOffset().AtStart()}}))
		if err != nil {
			return nil, err
		}
		defer cons.Close()
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		seen := map[string][]string{}
		for {
			fs := cons.PollFetches(rctx)
			if err := fs.Err0(); err != nil {
				return nil, fmt.Errorf("poll: %w", err)
			}
			done := false
			fs.EachRecord(func(r *kgo.Record) {
				seen[string(r.Key)] = append(seen[string(r.Key)], string(r.Value))
				done = done || r.Offset >= end.Offset-1
			})
			if done {
				return seen, nil
			}
		}
	}
	testwait.For(t, 30*time.Second, 100*time.Millisecond, func() error {
		for _, level := range []kgo.IsolationLevel{kgo.ReadUncommitted(), kgo.ReadCommitted()} {
			seen, err := read(level)
			if err != nil {
				return err
			}
			for k := 0; k < keys; k++ {
				if got := seen[fmt.Sprint("k", k)]; fmt.Sprint(got) != "[v4]" {
					return fmt.Errorf("key k%d: values %v, want [v4] (the newest committed)", k, got)
				}
			}
		}
		return nil
	})
}
