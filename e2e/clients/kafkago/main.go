// Command kafkago runs the e2e scenario with segmentio/kafka-go: a Writer, Reader group
// members (GroupID) and the Client's admin requests.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/e2e/scenario"
)

func main() {
	scenario.Main("kafka-go", func(env scenario.Env) (scenario.Client, error) {
		return &client{env: env, cl: &kafka.Client{Addr: kafka.TCP(env.Brokers...), Timeout: 10 * time.Second}, committed: map[int32]int64{}}, nil
	})
}

type client struct {
	env        scenario.Env
	cl         *kafka.Client
	partitions []int

	mu        sync.Mutex
	committed map[int32]int64 // highest acknowledged commit per partition, by any member
}

// codeErr turns a kafka-go error code into franz-go's error of the same code, which the
// scenario matches with errors.Is.
func codeErr(err error) error {
	if ke, ok := errors.AsType[kafka.Error](err); ok {
		return kerr.ErrorForCode(int16(ke))
	}
	return err
}

func (c *client) CreateTopic(ctx context.Context, topic string, partitions int) error {
	resp, err := c.cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: partitions, ReplicationFactor: 1,
	}}})
	if err != nil {
		return err
	}
	return codeErr(resp.Errors[topic])
}

func (c *client) Produce(ctx context.Context, topic string, n int) error {
	w := &kafka.Writer{
		Addr:         kafka.TCP(c.env.Brokers...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    1000,
		BatchTimeout: 5 * time.Millisecond,
		MaxAttempts:  20,
	}
	defer w.Close()
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: scenario.Key(i), Value: scenario.Value(i)}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		if werrs, ok := errors.AsType[kafka.WriteErrors](err); ok {
			return fmt.Errorf("%d of %d records failed: %w", werrs.Count(), n, err)
		}
		return err
	}
	return nil
}

func (c *client) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	md, err := c.cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		return nil, fmt.Errorf("metadata of %s: %+v", topic, md.Topics)
	}
	var reqs []kafka.OffsetRequest
	c.partitions = c.partitions[:0]
	for _, p := range md.Topics[0].Partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
		c.partitions = append(c.partitions, p.ID)
	}
	resp, err := c.cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, err
	}
	end := map[int32]int64{}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("partition %d: %w", po.Partition, codeErr(po.Error))
		}
		end[int32(po.Partition)] = po.LastOffset
	}
	return end, nil
}

type member struct {
	r      *kafka.Reader
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *client) NewMember(_ context.Context, id int, t *scenario.Tracker) (scenario.Member, error) {
	name := fmt.Sprintf("kafka-go-%d", id)
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     c.env.Brokers,
		GroupID:     c.env.Group,
		Topic:       c.env.Topic,
		StartOffset: kafka.FirstOffset,
		// Synchronous commits: CommitMessages says whether the broker took the commit.
		CommitInterval:    0,
		SessionTimeout:    10 * time.Second,
		HeartbeatInterval: 500 * time.Millisecond,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  100 * time.Millisecond,
		MaxWait:           200 * time.Millisecond,
		ReadBackoffMax:    200 * time.Millisecond,
		ErrorLogger:       log.New(os.Stderr, "["+name+"] ", log.LstdFlags|log.Lmicroseconds),
		Logger:            debugLogger(name),
	})
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			msg, err := r.FetchMessage(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: fetch: %v\n", name, err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if t.Admit(ctx) != nil {
				return
			}
			_ = t.Consumed(name, int32(msg.Partition), msg.Offset, msg.Key, msg.Value)
			// kafka-go commits whatever it is given, also records of a partition it lost in
			// a rebalance (still buffered, or held at the gate), which moves that partition's
			// commit back under its new owner. So a member commits a record only past the
			// highest commit any member had acknowledged for its partition; a commit the
			// broker refused (an old generation) leaves the record to its new owner.
			if !c.commitAdvances(int32(msg.Partition), msg.Offset+1) {
				continue
			}
			if err := r.CommitMessages(ctx, msg); err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "%s: commit: %v\n", name, err)
				}
				continue
			}
			c.acked(int32(msg.Partition), msg.Offset+1)
		}
	}()
	return m, nil
}

// commitAdvances reports whether committing next for partition would move its commit on.
func (c *client) commitAdvances(partition int32, next int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return next > c.committed[partition]
}

// acked records an acknowledged commit.
func (c *client) acked(partition int32, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if next > c.committed[partition] {
		c.committed[partition] = next
	}
}

// Close leaves the group.
func (m *member) Close(context.Context) error {
	m.cancel()
	<-m.done
	return m.r.Close()
}

// ListGroups: kafka-go's ListGroups does not return states.
func (c *client) ListGroups(ctx context.Context) (map[string]string, error) {
	resp, err := c.cl.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, codeErr(resp.Error)
	}
	out := map[string]string{}
	for _, g := range resp.Groups {
		out[g.GroupID] = ""
	}
	return out, nil
}

func (c *client) DescribeGroup(ctx context.Context, group string) (scenario.Group, error) {
	resp, err := c.cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return scenario.Group{}, err
	}
	if len(resp.Groups) != 1 {
		return scenario.Group{}, fmt.Errorf("DescribeGroups returned %d groups", len(resp.Groups))
	}
	g := resp.Groups[0]
	if g.Error != nil {
		return scenario.Group{}, codeErr(g.Error)
	}
	out := scenario.Group{State: g.GroupState, Members: len(g.Members)}
	for _, m := range g.Members {
		if len(m.MemberAssignments.Topics) > 0 {
			out.Assigned++
		}
	}
	return out, nil
}

func (c *client) FetchOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resp, err := c.cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: c.partitions}})
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, codeErr(resp.Error)
	}
	out := map[int32]int64{}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("partition %d: %w", p.Partition, codeErr(p.Error))
		}
		if p.CommittedOffset >= 0 {
			out[int32(p.Partition)] = p.CommittedOffset
		}
	}
	return out, nil
}

func (c *client) CommitOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	var commits []kafka.OffsetCommit
	for p, o := range offsets {
		commits = append(commits, kafka.OffsetCommit{Partition: int(p), Offset: o})
	}
	resp, err := c.cl.OffsetCommit(ctx, &kafka.OffsetCommitRequest{
		GroupID: group, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{topic: commits},
	})
	if err != nil {
		return err
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return fmt.Errorf("partition %d: %w", p.Partition, codeErr(p.Error))
		}
	}
	return nil
}

func (c *client) DeleteOffsets(ctx context.Context, group, topic string, partitions []int32) error {
	ps := make([]int, len(partitions))
	for i, p := range partitions {
		ps[i] = int(p)
	}
	resp, err := c.cl.OffsetDelete(ctx, &kafka.OffsetDeleteRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return codeErr(resp.Error)
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return fmt.Errorf("partition %d: %w", p.Partition, codeErr(p.Error))
		}
	}
	return nil
}

func (c *client) DeleteGroup(ctx context.Context, group string) error {
	resp, err := c.cl.DeleteGroups(ctx, &kafka.DeleteGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return err
	}
	return codeErr(resp.Errors[group])
}

// debugLogger logs kafka-go's group and commit events with E2E_DEBUG=1, to diagnose a FAIL.
func debugLogger(name string) kafka.Logger {
	if os.Getenv("E2E_DEBUG") != "1" {
		return nil
	}
	return log.New(os.Stderr, "["+name+" debug] ", log.LstdFlags|log.Lmicroseconds)
}
