// Command saramatxn runs the transactions scenario with IBM/sarama: a transactional
// SyncProducer writes transactions over every partition of a topic, some committed and some
// aborted; a read_committed consumer must see exactly the committed records, each once, and
// a read_uncommitted one every record. Then a consume-transform-produce step copies the
// committed records to a second topic with the consumed offsets in the transaction
// (AddMessageToTxn): once aborted, then redone and committed; the group's offsets must be
// visible only after the commit, and the output topic hold each record once at
// read_committed (twice at read_uncommitted: the aborted copy and the committed one).
// sarama sends the offsets of a transaction (AddOffsetsToTxn, TxnOffsetCommit) only inside
// CommitTxn and drops them at an abort, so its aborted round gives the broker no offsets.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"kaas/e2e/scenario"
)

const (
	name       = "sarama-txn"
	partitions = 3
	txns       = 6 // transactions t with t%3 == 1 are aborted; the last one is committed
	perPart    = 3 // records per partition per transaction
)

func aborted(t int) bool { return t%3 == 1 }

func key(t int, p int32, r int) string { return fmt.Sprintf("t%d-p%d-r%d", t, p, r) }

func main() {
	env := scenario.FromEnv(name)
	if os.Getenv("E2E_DEBUG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), env.Timeout)
	summary, err := run(ctx, env)
	cancel()
	title := fmt.Sprintf("%s (IBM/sarama %s)", name, sarama.DefaultVersion)
	if err != nil {
		fmt.Printf("FAIL %s: %v (after %.1fs)\n", title, err, time.Since(start).Seconds())
		os.Exit(1)
	}
	fmt.Printf("PASS %s: %s (%.1fs)\n", title, summary, time.Since(start).Seconds())
}

func config(txnID string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "e2e-sarama-txn"
	cfg.Metadata.Retry.Max = 50
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Admin.Retry.Max = 50
	cfg.Admin.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Retry.Backoff = 100 * time.Millisecond
	if txnID != "" {
		cfg.Producer.Idempotent = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Return.Successes = true
		cfg.Producer.Retry.Max = 50
		cfg.Producer.Retry.Backoff = 100 * time.Millisecond
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
		cfg.Producer.Transaction.ID = txnID
		cfg.Producer.Transaction.Retry.Max = 50
		cfg.Producer.Transaction.Retry.Backoff = 100 * time.Millisecond
		cfg.Net.MaxOpenRequests = 1
	}
	return cfg
}

func run(ctx context.Context, env scenario.Env) (string, error) {
	in, out, group := env.Topic, env.Topic+"-out", env.Group
	admin, err := sarama.NewClusterAdmin(env.Brokers, config(""))
	if err != nil {
		return "", fmt.Errorf("admin: %w", err)
	}
	defer admin.Close()
	cl, err := sarama.NewClient(env.Brokers, config(""))
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	for _, t := range []string{in, out} {
		if err := admin.CreateTopic(t, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
			return "", fmt.Errorf("create topic %s: %w", t, err)
		}
	}

	// 1. Transactions over every partition, some aborted.
	p, err := sarama.NewSyncProducer(env.Brokers, config(in+"-producer"))
	if err != nil {
		return "", fmt.Errorf("transactional producer: %w", err)
	}
	committed, abortedKeys := map[string]bool{}, map[string]bool{}
	for t := 0; t < txns; t++ {
		if err := p.BeginTxn(); err != nil {
			p.Close()
			return "", fmt.Errorf("transaction %d: begin: %w", t, err)
		}
		var msgs []*sarama.ProducerMessage
		for part := int32(0); part < partitions; part++ {
			for r := 0; r < perPart; r++ {
				k := key(t, part, r)
				v := "commit"
				if aborted(t) {
					v, abortedKeys[k] = "abort", true
				} else {
					committed[k] = true
				}
				msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Partition: part, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(v)})
			}
		}
		if err := p.SendMessages(msgs); err != nil {
			p.Close()
			return "", fmt.Errorf("transaction %d: produce: %w", t, err)
		}
		end := p.CommitTxn
		if aborted(t) {
			end = p.AbortTxn
		}
		if err := end(); err != nil {
			p.Close()
			return "", fmt.Errorf("transaction %d: end (aborted %v): %w", t, aborted(t), err)
		}
	}
	if err := p.Close(); err != nil {
		return "", fmt.Errorf("close the transactional producer: %w", err)
	}
	last := func(p int32) string { return key(txns-1, p, perPart-1) }

	rc, err := consume(ctx, env, in, sarama.ReadCommitted, last, 1)
	if err != nil {
		return "", fmt.Errorf("read_committed %s: %w", in, err)
	}
	if err := exactly(rc, committed, 1); err != nil {
		return "", fmt.Errorf("read_committed %s: %w", in, err)
	}
	ru, err := consume(ctx, env, in, sarama.ReadUncommitted, last, 1)
	if err != nil {
		return "", fmt.Errorf("read_uncommitted %s: %w", in, err)
	}
	all := map[string]bool{}
	for k := range committed {
		all[k] = true
	}
	for k := range abortedKeys {
		all[k] = true
	}
	if err := exactly(ru, all, 1); err != nil {
		return "", fmt.Errorf("read_uncommitted %s: %w", in, err)
	}

	// 2. Consume-transform-produce with the offsets in the transaction: aborted, then redone.
	ctp, err := sarama.NewSyncProducer(env.Brokers, config(in+"-ctp"))
	if err != nil {
		return "", fmt.Errorf("consume-transform-produce producer: %w", err)
	}
	defer ctp.Close()
	want := map[int32]int64{}
	for _, m := range rc {
		want[m.Partition] = max(want[m.Partition], m.Offset+1)
	}
	for round, commit := range []bool{false, true} {
		if err := ctp.BeginTxn(); err != nil {
			return "", fmt.Errorf("copy %d: begin: %w", round, err)
		}
		for _, m := range rc {
			if _, _, err := ctp.SendMessage(&sarama.ProducerMessage{Topic: out, Partition: m.Partition, Key: sarama.ByteEncoder(m.Key), Value: sarama.StringEncoder("copy-" + string(m.Value))}); err != nil {
				return "", fmt.Errorf("copy %d: produce: %w", round, err)
			}
			if err := ctp.AddMessageToTxn(m, group, nil); err != nil {
				return "", fmt.Errorf("copy %d: AddMessageToTxn: %w", round, err)
			}
		}
		if err := expectOffsets(ctx, cl, group, in, nil, "before the end of the transaction"); err != nil {
			return "", fmt.Errorf("copy %d: %w", round, err)
		}
		if !commit {
			if err := ctp.AbortTxn(); err != nil {
				return "", fmt.Errorf("copy %d: abort: %w", round, err)
			}
			if err := expectOffsets(ctx, cl, group, in, nil, "after the abort"); err != nil {
				return "", err
			}
			continue
		}
		if err := ctp.CommitTxn(); err != nil {
			return "", fmt.Errorf("copy %d: commit: %w", round, err)
		}
		if err := expectOffsets(ctx, cl, group, in, want, "after the commit"); err != nil {
			return "", err
		}
	}
	copies := map[string]bool{}
	for _, m := range rc {
		copies[string(m.Key)] = true
	}
	oc, err := consume(ctx, env, out, sarama.ReadCommitted, last, 1)
	if err != nil {
		return "", fmt.Errorf("read_committed %s: %w", out, err)
	}
	if err := exactly(oc, copies, 1); err != nil {
		return "", fmt.Errorf("read_committed %s: %w", out, err)
	}
	ou, err := consume(ctx, env, out, sarama.ReadUncommitted, last, 2)
	if err != nil {
		return "", fmt.Errorf("read_uncommitted %s: %w", out, err)
	}
	if err := exactly(ou, copies, 2); err != nil {
		return "", fmt.Errorf("read_uncommitted %s: %w", out, err)
	}
	return fmt.Sprintf("%d transactions over %d partitions (%d aborted): read_committed saw the %d committed records once each, read_uncommitted all %d; "+
		"consume-transform-produce with AddMessageToTxn, aborted then committed: the group's offsets %v only after the commit (sarama sends them at the commit only), "+
		"read_committed output each record once, read_uncommitted twice", txns, partitions, len(abortedKeys)/(partitions*perPart),
		len(committed), len(all), want), nil
}

// consume reads every partition of topic from its start at the isolation level until the
// partition's last record (last(p)) has come n times, and returns what it read.
func consume(ctx context.Context, env scenario.Env, topic string, iso sarama.IsolationLevel, last func(int32) string, n int) ([]*sarama.ConsumerMessage, error) {
	cfg := config("")
	cfg.Consumer.IsolationLevel = iso
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	c, err := sarama.NewConsumer(env.Brokers, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// Every partition fetches at once; each is then read to its last record.
	pcs := make([]sarama.PartitionConsumer, partitions)
	defer func() {
		for _, pc := range pcs {
			if pc != nil {
				pc.AsyncClose()
			}
		}
	}()
	for part := range pcs {
		if pcs[part], err = c.ConsumePartition(topic, int32(part), sarama.OffsetOldest); err != nil {
			return nil, fmt.Errorf("partition %d: %w", part, err)
		}
	}
	var got []*sarama.ConsumerMessage
	for part, pc := range pcs {
		part := int32(part)
		for seen := 0; seen < n; {
			select {
			case m := <-pc.Messages():
				got = append(got, m)
				if string(m.Key) == last(part) {
					seen++
				}
			case err := <-pc.Errors():
				return nil, fmt.Errorf("partition %d: %w", part, err)
			case <-ctx.Done():
				return nil, fmt.Errorf("partition %d: %d records read, the last one (%s) seen %d times of %d: %w", part, len(got), last(part), seen, n, ctx.Err())
			}
		}
	}
	return got, nil
}

// exactly checks that msgs hold each key of want n times and nothing else.
func exactly(msgs []*sarama.ConsumerMessage, want map[string]bool, n int) error {
	count := map[string]int{}
	for _, m := range msgs {
		count[string(m.Key)]++
	}
	var bad []string
	for k := range want {
		if count[k] != n {
			bad = append(bad, fmt.Sprintf("%s %d times", k, count[k]))
		}
	}
	for k, c := range count {
		if !want[k] {
			bad = append(bad, fmt.Sprintf("%s (not expected) %d times", k, c))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		if len(bad) > 6 {
			bad = append(bad[:6], fmt.Sprintf("and %d more", len(bad)-6))
		}
		return fmt.Errorf("%d records read, want %d each %d times: %s", len(msgs), len(want), n, strings.Join(bad, ", "))
	}
	return nil
}

// expectOffsets checks the group's committed offsets of topic: want, or none when want is
// nil. It asks with require_stable (OffsetFetch v7, KIP-447), so offsets a transaction is
// still ending are UNSTABLE_OFFSET_COMMIT, asked again until they are settled.
func expectOffsets(ctx context.Context, cl sarama.Client, group, topic string, want map[int32]int64, when string) error {
	ps := make([]int32, partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	for {
		got, err := fetchStable(cl, group, topic, ps)
		if errors.Is(err, sarama.ErrUnstableOffsetCommit) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("fetch the group's offsets %s: still %v: %w", when, err, ctx.Err())
			case <-time.After(20 * time.Millisecond):
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("fetch the group's offsets %s: %w", when, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(map[int32]int64(want)) && !(len(got) == 0 && len(want) == 0) {
			return fmt.Errorf("the group's offsets %s are %v, want %v", when, got, want)
		}
		return nil
	}
}

func fetchStable(cl sarama.Client, group, topic string, ps []int32) (map[int32]int64, error) {
	coord, err := cl.Coordinator(group)
	if err != nil {
		return nil, err
	}
	req := &sarama.OffsetFetchRequest{Version: 7, ConsumerGroup: group, RequireStable: true}
	for _, p := range ps {
		req.AddPartition(topic, p)
	}
	resp, err := coord.FetchOffset(req)
	if err != nil {
		return nil, err
	}
	if resp.Err == sarama.ErrGroupIDNotFound { // kfake's answer for a group it never saw
		return nil, nil
	}
	if resp.Err != sarama.ErrNoError {
		return nil, resp.Err
	}
	got := map[int32]int64{}
	for _, part := range ps {
		b := resp.GetBlock(topic, part)
		if b == nil {
			return nil, fmt.Errorf("no answer for partition %d", part)
		}
		if b.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("partition %d: %w", part, b.Err)
		}
		if b.Offset >= 0 {
			got[part] = b.Offset
		}
	}
	return got, nil
}
