package franz

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/e2e/scenario"
)

// Options choose the group flavour of the members.
type Options struct {
	Balancer kgo.GroupBalancer // nil: kgo's default (cooperative-sticky)
	Static   bool              // give every member a group.instance.id (KIP-345)
	Mixed    bool              // give even-numbered members a group.instance.id, the rest none
	// ServerSide runs the members on the consumer group protocol (KIP-848,
	// kgo.ServerSideBalancer): the broker assigns, and groups are described with
	// ConsumerGroupDescribe.
	ServerSide bool
}

// Client is the franz-go scenario client. Its admin half also serves the other clients.
type Client struct {
	env  scenario.Env
	opts Options
	cl   *kgo.Client
	adm  *kadm.Client
}

var _ scenario.Client = (*Client)(nil)

// New connects a kgo client (producer and admin) to env's brokers.
func New(env scenario.Env, opts Options) (*Client, error) {
	cl, err := kgo.NewClient(base(env)...)
	if err != nil {
		return nil, err
	}
	return &Client{env: env, opts: opts, cl: cl, adm: kadm.NewClient(cl)}, nil
}

func base(env scenario.Env) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(env.Brokers...),
		kgo.ClientID("e2e-kgo"),
		// The broker restarts once: retry through it instead of failing fast.
		kgo.RetryTimeout(30 * time.Second),
		kgo.RequestRetries(50),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, logLevel(), nil)),
	}
	switch env.SASLMechanism {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: env.SASLUser, Pass: env.SASLPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: env.SASLUser, Pass: env.SASLPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: env.SASLUser, Pass: env.SASLPassword}.AsSha512Mechanism()))
	}
	return opts
}

// Close closes the producer and admin connections.
func (c *Client) Close() { c.cl.Close() }

// CreateTopic creates topic with CreateTopics.
func (c *Client) CreateTopic(ctx context.Context, topic string, partitions int) error {
	resp, err := c.adm.CreateTopic(ctx, int32(partitions), 1, nil, topic)
	if err != nil {
		return err
	}
	return resp.Err
}

// Produce produces the scenario records with acks=all (kgo's default) and idempotence.
func (c *Client) Produce(ctx context.Context, topic string, n int) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i := range n {
		wg.Add(1)
		c.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: scenario.Key(i), Value: scenario.Value(i)}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("record %d: %w", i, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// EndOffsets lists the log end offsets with ListOffsets (latest).
func (c *Client) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	listed, err := c.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := listed.Error(); err != nil {
		return nil, err
	}
	end := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return end, nil
}

// member is one kgo group consumer; records are marked for commit only after the tracker
// took them, so an autocommit never covers a record the scenario did not see.
type member struct {
	name     string
	instance string
	cl       *kgo.Client
	adm      *kadm.Client
	cancel   context.CancelFunc
	done     chan struct{}
}

// NewMember starts a kgo group member polling in its own goroutine.
func (c *Client) NewMember(_ context.Context, id int, t *scenario.Tracker) (scenario.Member, error) {
	m := &member{name: fmt.Sprintf("kgo-%d", id), done: make(chan struct{})}
	opts := append(base(c.env),
		kgo.ConsumerGroup(c.env.Group),
		kgo.ConsumeTopics(c.env.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(300*time.Millisecond),
		kgo.SessionTimeout(10*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond),
	)
	if c.opts.Balancer != nil {
		opts = append(opts, kgo.Balancers(c.opts.Balancer))
	}
	if c.opts.ServerSide {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	if c.opts.Static || c.opts.Mixed && id%2 == 0 {
		m.instance = m.name
		opts = append(opts, kgo.InstanceID(m.instance))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	m.cl, m.adm = cl, c.adm
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.poll(ctx, t)
	return m, nil
}

func (m *member) poll(ctx context.Context, t *scenario.Tracker) {
	defer close(m.done)
	for {
		fs := m.cl.PollRecords(ctx, 200)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "%s: fetch %s/%d: %v\n", m.name, topic, p, err)
		})
		for _, r := range fs.Records() {
			if t.Admit(ctx) != nil {
				return
			}
			_ = t.Consumed(m.name, r.Partition, r.Offset, r.Key, r.Value)
			m.cl.MarkCommitRecords(r)
		}
	}
}

// Close commits the marked records and leaves the group. A static member's Close does not
// leave (KIP-345: it is expected back), so it is removed by instance id, as an operator
// scaling down would.
func (m *member) Close(ctx context.Context) error {
	m.cancel()
	<-m.done
	err := m.cl.CommitMarkedOffsets(ctx)
	m.cl.Close()
	if err != nil {
		return fmt.Errorf("commit marked offsets: %w", err)
	}
	if m.instance == "" {
		return nil
	}
	resp, err := m.adm.LeaveGroup(ctx, kadm.LeaveGroup(m.cl.OptValue(kgo.ConsumerGroup).(string)).InstanceIDs(m.instance))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("LeaveGroup of instance %s: %w", m.instance, err)
	}
	return nil
}

// ListGroups lists the groups with their state (ListGroups v4+ carries it).
func (c *Client) ListGroups(ctx context.Context) (map[string]string, error) {
	listed, err := c.adm.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for g, l := range listed {
		out[g] = l.State
	}
	return out, nil
}

// DescribeGroup describes one group with DescribeGroups (ConsumerGroupDescribe for the
// consumer group protocol).
func (c *Client) DescribeGroup(ctx context.Context, group string) (scenario.Group, error) {
	if c.opts.ServerSide {
		return c.describeConsumerGroup(ctx, group)
	}
	described, err := c.adm.DescribeGroups(ctx, group)
	if err != nil {
		return scenario.Group{}, err
	}
	d, ok := described[group]
	if !ok {
		return scenario.Group{}, fmt.Errorf("group %s missing from the DescribeGroups response", group)
	}
	if d.Err != nil {
		return scenario.Group{}, d.Err
	}
	g := scenario.Group{State: d.State, Protocol: d.Protocol, Members: len(d.Members)}
	for _, m := range d.Members {
		if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 {
			g.Assigned++
		}
	}
	return g, nil
}

// FetchOffsets fetches the group's committed offsets of topic with OffsetFetch.
func (c *Client) FetchOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resps, err := c.adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var first error
	resps.Each(func(o kadm.OffsetResponse) {
		if o.Topic != topic {
			return
		}
		if o.Err != nil && first == nil {
			first = fmt.Errorf("partition %d: %w", o.Partition, o.Err)
		}
		if o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out, first
}

// StableOffsets fetches the group's committed offsets of partitions 0..partitions-1 of
// topic with require_stable (OffsetFetch v7, KIP-447): while a transaction that holds
// offsets of the group is ending, the broker answers UNSTABLE_OFFSET_COMMIT and it asks
// again, so what it returns is settled. A group the broker does not know has no offsets.
func (c *Client) StableOffsets(ctx context.Context, group, topic string, partitions int) (map[int32]int64, error) {
	for {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = 7
		req.Group = group
		req.RequireStable = true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = topic
		for p := range partitions {
			rt.Partitions = append(rt.Partitions, int32(p))
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil {
			return nil, err
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		out := map[int32]int64{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil && err == nil {
					err = fmt.Errorf("partition %d: %w", p.Partition, perr)
				}
				if t.Topic == topic && p.Offset >= 0 {
					out[p.Partition] = p.Offset
				}
			}
		}
		switch {
		case errors.Is(err, kerr.UnstableOffsetCommit):
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("offsets still unstable: %w", ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		case errors.Is(err, kerr.GroupIDNotFound): // kfake's answer for a group it never saw
			return map[int32]int64{}, nil
		case err != nil:
			return nil, err
		default:
			return out, nil
		}
	}
}

// CommitOffsets commits with OffsetCommit outside any generation (kadm sends generation -1).
func (c *Client) CommitOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	set := make(kadm.Offsets)
	for p, o := range offsets {
		set.AddOffset(topic, p, o, -1)
	}
	resps, err := c.adm.CommitOffsets(ctx, group, set)
	if err != nil {
		return err
	}
	return resps.Error()
}

// DeleteOffsets deletes committed offsets with OffsetDelete.
func (c *Client) DeleteOffsets(ctx context.Context, group, topic string, partitions []int32) error {
	s := make(kadm.TopicsSet)
	s.Add(topic, partitions...)
	resps, err := c.adm.DeleteOffsets(ctx, group, s)
	if err != nil {
		return err
	}
	return resps.Error()
}

// DeleteRecords moves the log start offset of each partition of topic to its offset with
// DeleteRecords and returns the low watermarks answered.
func (c *Client) DeleteRecords(ctx context.Context, topic string, offsets map[int32]int64) (map[int32]int64, error) {
	o := make(kadm.Offsets)
	for p, at := range offsets {
		o.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
	}
	resps, err := c.adm.DeleteRecords(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := resps.Error(); err != nil {
		return nil, err
	}
	low := make(map[int32]int64)
	resps.Each(func(r kadm.DeleteRecordsResponse) { low[r.Partition] = r.LowWatermark })
	return low, nil
}

// DeleteGroup deletes the group with DeleteGroups.
func (c *Client) DeleteGroup(ctx context.Context, group string) error {
	resps, err := c.adm.DeleteGroups(ctx, group)
	if err != nil {
		return err
	}
	r, ok := resps[group]
	if !ok {
		return errors.New("group missing from the DeleteGroups response")
	}
	return r.Err
}

// logLevel is Warn, or Debug with E2E_DEBUG=1 (every request kgo sends, to diagnose a FAIL).
func logLevel() kgo.LogLevel {
	if os.Getenv("E2E_DEBUG") == "1" {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

// describeConsumerGroup describes a consumer-protocol group; a member holds partitions when
// its current assignment has some.
func (c *Client) describeConsumerGroup(ctx context.Context, group string) (scenario.Group, error) {
	described, err := c.adm.DescribeConsumerGroups(ctx, group)
	if err != nil {
		return scenario.Group{}, err
	}
	d, ok := described[group]
	if !ok {
		return scenario.Group{}, fmt.Errorf("group %s missing from the ConsumerGroupDescribe response", group)
	}
	if d.Err != nil {
		return scenario.Group{}, d.Err
	}
	g := scenario.Group{State: d.State, Protocol: d.AssignorName, Members: len(d.Members)}
	for _, m := range d.Members {
		if len(m.Assignment) > 0 {
			g.Assigned++
		}
	}
	return g, nil
}
