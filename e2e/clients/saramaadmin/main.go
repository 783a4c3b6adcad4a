// Command saramaadmin runs the admin scenario with IBM/sarama's ClusterAdmin, the calls
// operators' tools and stream platforms make (issue 28): create a compacted topic with
// configs, describe its configs (values and sources), alter them incrementally (a SET and a
// DELETE back to the default), describe the cluster and the log dirs, delete the records
// below an offset (the low watermark moves there, a consumer from the oldest offset begins
// there, one below it is out of range), delete the topic.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"kaas/e2e/scenario"
)

const (
	name    = "sarama-admin"
	records = 20 // to partition 0: keys k0..k9, each twice
	cut     = 10 // DeleteRecords before this offset of partition 0
)

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

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "e2e-sarama-admin"
	cfg.Metadata.Retry.Max = 50
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Admin.Retry.Max = 50
	cfg.Admin.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Retry.Backoff = 100 * time.Millisecond
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 50
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	return cfg
}

func str(s string) *string { return &s }

// describe returns the topic's configs by name.
func describe(admin sarama.ClusterAdmin, topic string) (map[string]sarama.ConfigEntry, error) {
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		return nil, fmt.Errorf("describe configs of %s: %w", topic, err)
	}
	m := make(map[string]sarama.ConfigEntry, len(entries))
	for _, e := range entries {
		m[e.Name] = e
	}
	return m, nil
}

// want checks that config k is v from source src (any of srcs).
func want(cfgs map[string]sarama.ConfigEntry, k, v string, srcs ...sarama.ConfigSource) error {
	e, ok := cfgs[k]
	if !ok {
		return fmt.Errorf("%s not described", k)
	}
	if v != "" && e.Value != v {
		return fmt.Errorf("%s = %q, want %q", k, e.Value, v)
	}
	if !slices.Contains(srcs, e.Source) {
		return fmt.Errorf("%s (%s) source %s, want %v", k, e.Value, e.Source, srcs)
	}
	return nil
}

func run(ctx context.Context, env scenario.Env) (string, error) {
	topic := env.Topic
	admin, err := sarama.NewClusterAdmin(env.Brokers, config())
	if err != nil {
		return "", fmt.Errorf("admin: %w", err)
	}
	defer admin.Close()
	cl, err := sarama.NewClient(env.Brokers, config())
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	var steps []string

	// 1. A compacted topic with configs.
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1, ConfigEntries: map[string]*string{
		"cleanup.policy":    str("compact"),
		"retention.ms":      str("3600000"),
		"max.message.bytes": str("200000"),
	}}, false); err != nil {
		return "", fmt.Errorf("create topic %s: %w", topic, err)
	}
	cfgs, err := describe(admin, topic)
	if err != nil {
		return "", err
	}
	if err := errors.Join(
		want(cfgs, "cleanup.policy", "compact", sarama.SourceTopic),
		want(cfgs, "retention.ms", "3600000", sarama.SourceTopic),
		want(cfgs, "max.message.bytes", "200000", sarama.SourceTopic),
		want(cfgs, "segment.bytes", "", sarama.SourceDefault, sarama.SourceStaticBroker),
	); err != nil {
		return "", fmt.Errorf("after create: %w", err)
	}
	steps = append(steps, fmt.Sprintf("created compacted, %d configs described (set ones from the topic, segment.bytes %s from %s)",
		len(cfgs), cfgs["segment.bytes"].Value, cfgs["segment.bytes"].Source))

	// 2. IncrementalAlterConfigs: SET one, DELETE one (back to its default), the rest kept.
	if err := admin.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms":      {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: str("7200000")},
		"max.message.bytes": {Operation: sarama.IncrementalAlterConfigsOperationDelete},
	}, false); err != nil {
		return "", fmt.Errorf("incremental alter configs: %w", err)
	}
	if cfgs, err = describe(admin, topic); err != nil {
		return "", err
	}
	if err := errors.Join(
		want(cfgs, "cleanup.policy", "compact", sarama.SourceTopic),
		want(cfgs, "retention.ms", "7200000", sarama.SourceTopic),
		want(cfgs, "max.message.bytes", "", sarama.SourceDefault, sarama.SourceStaticBroker),
	); err != nil {
		return "", fmt.Errorf("after incremental alter: %w", err)
	}
	steps = append(steps, fmt.Sprintf("IncrementalAlterConfigs SET retention.ms, DELETE max.message.bytes (now %s from %s)",
		cfgs["max.message.bytes"].Value, cfgs["max.message.bytes"].Source))

	// 3. DescribeCluster.
	brokers, controller, err := admin.DescribeCluster()
	if err != nil {
		return "", fmt.Errorf("describe cluster: %w", err)
	}
	var ids []int32
	var addrs []string
	for _, b := range brokers {
		ids = append(ids, b.ID())
		addrs = append(addrs, b.Addr())
	}
	if !slices.Contains(ids, controller) || !slices.Contains(addrs, env.Brokers[0]) {
		return "", fmt.Errorf("describe cluster: brokers %v at %v, controller %d: want the controller among them and %s listed", ids, addrs, controller, env.Brokers[0])
	}
	steps = append(steps, fmt.Sprintf("DescribeCluster %d broker(s), controller %d", len(brokers), controller))

	// 4. Records, then DescribeLogDirs sees their bytes.
	p, err := sarama.NewSyncProducerFromClient(cl)
	if err != nil {
		return "", fmt.Errorf("producer: %w", err)
	}
	var msgs []*sarama.ProducerMessage
	for i := 0; i < records; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: 0,
			Key: sarama.StringEncoder(fmt.Sprintf("k%d", i%10)), Value: sarama.StringEncoder(fmt.Sprintf("v%d", i))})
	}
	err = p.SendMessages(msgs)
	p.Close()
	if err != nil {
		return "", fmt.Errorf("produce: %w", err)
	}
	dirs, err := admin.DescribeLogDirs(ids)
	if err != nil {
		return "", fmt.Errorf("describe log dirs: %w", err)
	}
	var size int64 = -1
	for _, ds := range dirs {
		for _, d := range ds {
			for _, t := range d.Topics {
				if t.Topic != topic {
					continue
				}
				for _, pm := range t.Partitions {
					if pm.PartitionID == 0 {
						size = pm.Size
					}
				}
			}
		}
	}
	if size <= 0 {
		return "", fmt.Errorf("describe log dirs: partition 0 of %s size %d, want its bytes (%v)", topic, size, dirs)
	}
	steps = append(steps, fmt.Sprintf("DescribeLogDirs partition 0 %d bytes", size))

	// 5. DeleteRecords below cut: the low watermark moves there, a consumer from the oldest
	// offset begins there, one below it is out of range.
	if err := admin.DeleteRecords(topic, map[int32]int64{0: cut}); err != nil {
		return "", fmt.Errorf("delete records: %w", err)
	}
	low, err := cl.GetOffset(topic, 0, sarama.OffsetOldest)
	if err != nil {
		return "", fmt.Errorf("earliest offset: %w", err)
	}
	if low != cut {
		return "", fmt.Errorf("earliest offset after DeleteRecords(%d) is %d", cut, low)
	}
	first, err := firstRecord(ctx, cl, topic, sarama.OffsetOldest)
	if err != nil {
		return "", err
	}
	if first.Offset != cut || string(first.Key) != fmt.Sprintf("k%d", cut%10) || string(first.Value) != fmt.Sprintf("v%d", cut) {
		return "", fmt.Errorf("a consumer from the oldest offset began at %d (%s=%s), want %d", first.Offset, first.Key, first.Value, cut)
	}
	if _, err := firstRecord(ctx, cl, topic, cut/2); !errors.Is(err, sarama.ErrOffsetOutOfRange) {
		return "", fmt.Errorf("consume from %d below the low watermark: %v, want %v", cut/2, err, sarama.ErrOffsetOutOfRange)
	}
	steps = append(steps, fmt.Sprintf("DeleteRecords before %d: earliest offset %d, a consumer from the oldest begins there, below it OFFSET_OUT_OF_RANGE", cut, low))

	// 6. DeleteTopics.
	if err := admin.DeleteTopic(topic); err != nil {
		return "", fmt.Errorf("delete topic: %w", err)
	}
	for {
		ts, err := admin.ListTopics()
		if err != nil {
			return "", fmt.Errorf("list topics: %w", err)
		}
		if _, ok := ts[topic]; !ok {
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s still listed after its deletion", topic)
		case <-time.After(100 * time.Millisecond):
		}
	}
	steps = append(steps, "topic deleted")
	return strings.Join(steps, "; "), nil
}

// firstRecord consumes partition 0 of topic from offset and returns the first record.
func firstRecord(ctx context.Context, cl sarama.Client, topic string, offset int64) (*sarama.ConsumerMessage, error) {
	c, err := sarama.NewConsumerFromClient(cl)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, offset)
	if err != nil {
		return nil, fmt.Errorf("consume partition 0 from %d: %w", offset, err)
	}
	defer pc.Close()
	select {
	case m := <-pc.Messages():
		return m, nil
	case err := <-pc.Errors():
		return nil, fmt.Errorf("consume partition 0 from %d: %w", offset, err)
	case <-ctx.Done():
		return nil, fmt.Errorf("no record from offset %d of partition 0", offset)
	}
}
