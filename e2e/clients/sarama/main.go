// Command sarama runs the e2e scenario with IBM/sarama: a SyncProducer, ConsumerGroup
// members (round-robin, sarama's default protocol version) and the ClusterAdmin.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/e2e/scenario"
)

func main() {
	scenario.Main("sarama", func(env scenario.Env) (scenario.Client, error) { return newClient(env) })
}

type client struct {
	env   scenario.Env
	cfg   *sarama.Config
	cl    sarama.Client
	admin sarama.ClusterAdmin
}

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "e2e-sarama"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 50
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Metadata.Retry.Max = 50
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Admin.Retry.Max = 50
	cfg.Admin.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 300 * time.Millisecond
	cfg.Consumer.Offsets.Retry.Max = 50
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Retry.Max = 100
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRoundRobin()}
	cfg.Consumer.Retry.Backoff = 100 * time.Millisecond
	return cfg
}

func newClient(env scenario.Env) (*client, error) {
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags)
	cfg := config()
	cl, err := sarama.NewClient(env.Brokers, cfg)
	if err != nil {
		return nil, err
	}
	admin, err := sarama.NewClusterAdminFromClient(cl)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &client{env: env, cfg: cfg, cl: cl, admin: admin}, nil
}

func (c *client) Close() { _ = c.admin.Close() }

func (c *client) CreateTopic(_ context.Context, topic string, partitions int) error {
	return c.admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: int32(partitions), ReplicationFactor: 1}, false)
}

func (c *client) Produce(_ context.Context, topic string, n int) error {
	p, err := sarama.NewSyncProducerFromClient(c.cl)
	if err != nil {
		return err
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(scenario.Key(i)), Value: sarama.ByteEncoder(scenario.Value(i))}
	}
	if err := p.SendMessages(msgs); err != nil {
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			return fmt.Errorf("%d of %d records failed, first: %w", len(perrs), n, perrs[0].Err)
		}
		return err
	}
	return nil
}

func (c *client) EndOffsets(_ context.Context, topic string) (map[int32]int64, error) {
	if err := c.cl.RefreshMetadata(topic); err != nil {
		return nil, err
	}
	parts, err := c.cl.Partitions(topic)
	if err != nil {
		return nil, err
	}
	end := map[int32]int64{}
	for _, p := range parts {
		o, err := c.cl.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", p, err)
		}
		end[p] = o
	}
	return end, nil
}

// codeErr turns a sarama error code into franz-go's error of the same code, which the
// scenario matches with errors.Is.
func codeErr(e sarama.KError) error { return kerr.ErrorForCode(int16(e)) }

type member struct {
	name   string
	cg     sarama.ConsumerGroup
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *client) NewMember(_ context.Context, id int, t *scenario.Tracker) (scenario.Member, error) {
	cg, err := sarama.NewConsumerGroup(c.env.Brokers, c.env.Group, config())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: fmt.Sprintf("sarama-%d", id), cg: cg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		h := handler{name: m.name, t: t}
		for ctx.Err() == nil {
			// Consume returns at every rebalance; a member calls it again to rejoin.
			if err := cg.Consume(ctx, []string{c.env.Topic}, h); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "%s: consume: %v\n", m.name, err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return m, nil
}

// Close ends the session (its offset manager commits what was marked) and leaves the group.
func (m *member) Close(context.Context) error {
	m.cancel()
	<-m.done
	return m.cg.Close()
}

type handler struct {
	name string
	t    *scenario.Tracker
}

func (handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h handler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			if h.t.Admit(s.Context()) != nil {
				return nil
			}
			_ = h.t.Consumed(h.name, msg.Partition, msg.Offset, msg.Key, msg.Value)
			s.MarkMessage(msg, "")
		case <-s.Context().Done():
			return nil
		}
	}
}

// ListGroups: sarama's ListConsumerGroups returns protocol types, not states.
func (c *client) ListGroups(context.Context) (map[string]string, error) {
	groups, err := c.admin.ListConsumerGroups()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for g := range groups {
		out[g] = ""
	}
	return out, nil
}

func (c *client) DescribeGroup(_ context.Context, group string) (scenario.Group, error) {
	ds, err := c.admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		return scenario.Group{}, err
	}
	if len(ds) != 1 {
		return scenario.Group{}, fmt.Errorf("DescribeGroups returned %d groups", len(ds))
	}
	d := ds[0]
	if d.Err != sarama.ErrNoError {
		return scenario.Group{}, codeErr(d.Err)
	}
	g := scenario.Group{State: d.State, Protocol: d.Protocol, Members: len(d.Members)}
	for _, m := range d.Members {
		if a, err := m.GetMemberAssignment(); err == nil && a != nil && len(a.Topics) > 0 {
			g.Assigned++
		}
	}
	return g, nil
}

func (c *client) FetchOffsets(_ context.Context, group, topic string) (map[int32]int64, error) {
	resp, err := c.admin.ListConsumerGroupOffsets(group, nil)
	if ke, ok := errors.AsType[sarama.KError](err); ok {
		return nil, codeErr(ke)
	}
	if err != nil {
		return nil, err
	}
	if resp.Err != sarama.ErrNoError {
		return nil, codeErr(resp.Err)
	}
	out := map[int32]int64{}
	for p, b := range resp.Blocks[topic] {
		if b.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("partition %d: %w", p, codeErr(b.Err))
		}
		if b.Offset >= 0 {
			out[p] = b.Offset
		}
	}
	return out, nil
}

func (c *client) CommitOffsets(_ context.Context, group, topic string, offsets map[int32]int64) error {
	om := map[int32]sarama.OffsetAndMetadata{}
	for p, o := range offsets {
		om[p] = sarama.OffsetAndMetadata{Offset: o, LeaderEpoch: -1}
	}
	resp, err := c.admin.AlterConsumerGroupOffsets(group, map[string]map[int32]sarama.OffsetAndMetadata{topic: om}, nil)
	if err != nil {
		return err
	}
	for p, e := range resp.Errors[topic] {
		if e != sarama.ErrNoError {
			return fmt.Errorf("partition %d: %w", p, codeErr(e))
		}
	}
	return nil
}

func (c *client) DeleteOffsets(_ context.Context, group, topic string, partitions []int32) error {
	for _, p := range partitions {
		if err := c.admin.DeleteConsumerGroupOffset(group, topic, p); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}

func (c *client) DeleteGroup(_ context.Context, group string) error {
	return c.admin.DeleteConsumerGroup(group)
}
