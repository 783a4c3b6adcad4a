package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// probeDoc is what `groups probe` did, step by step.
type probeDoc struct {
	Topic      string      `json:"topic"`
	Group      string      `json:"group"`
	Partition  int32       `json:"partition"`
	Offset     int64       `json:"offset"`
	Generation int32       `json:"generation"`
	Committed  int64       `json:"committed"`
	Steps      []probeStep `json:"steps"`
}

type probeStep struct {
	Step   string  `json:"step"`
	Detail string  `json:"detail"`
	Millis float64 `json:"ms"`
}

// probeGroup is the check a deployment runs (`helm test`): as a real client it makes sure
// the topic exists, produces one record (acks=all), joins a consumer group that consumes
// the topic, fetches that record, commits past it and reads the commit back.
func probeGroup(fs *flag.FlagSet) action {
	var topic, group string
	fs.StringVar(&topic, "topic", "kaas-probe", "the `topic` to produce to and consume (made with one partition if missing)")
	fs.StringVar(&group, "group", "kaas-probe", "the consumer `group` to join and commit in")
	return action{
		check: func() error {
			if topic == "" || group == "" {
				return errors.New("--topic and --group must not be empty")
			}
			return nil
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			doc, err := c.probe(ctx, topic, group)
			if c.json {
				if doc.Steps == nil {
					doc.Steps = []probeStep{}
				}
				if derr := c.document(doc); derr != nil {
					return derr
				}
			} else {
				var rows [][]string
				for _, s := range doc.Steps {
					rows = append(rows, []string{s.Step, s.Detail, fmt.Sprintf("%.1f", s.Millis)})
				}
				c.table([]string{"STEP", "DETAIL", "MS"}, rows)
			}
			return err
		},
	}
}

func (c *cmd) probe(ctx context.Context, topic, group string) (probeDoc, error) {
	doc := probeDoc{Topic: topic, Group: group, Partition: -1, Offset: -1, Committed: -1}
	step := func(name, detail string, start time.Time) {
		doc.Steps = append(doc.Steps, probeStep{name, detail, float64(time.Since(start).Microseconds()) / 1000})
	}

	start := time.Now()
	// CreateTopic returns the topic's error as err too.
	res, err := c.adm.CreateTopic(ctx, 1, -1, nil, topic)
	switch {
	case err == nil:
		step("topic", "created "+topic, start)
	case errors.Is(err, kerr.TopicAlreadyExists):
		step("topic", topic+" exists", start)
	default:
		return doc, fmt.Errorf("create topic %s: %w", topic, withMessage(err, res.ErrMessage))
	}

	var token [8]byte
	_, _ = rand.Read(token[:])
	value := "kaas-probe-" + hex.EncodeToString(token[:])
	prod, err := kgo.NewClient(c.clientOpts(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return doc, fmt.Errorf("producer: %w", err)
	}
	defer prod.Close()
	start = time.Now()
	rec, err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).First()
	if err != nil {
		return doc, fmt.Errorf("produce to %s: %w", topic, err)
	}
	doc.Partition, doc.Offset = rec.Partition, rec.Offset
	step("produce", fmt.Sprintf("%s/%d offset %d", topic, rec.Partition, rec.Offset), start)

	cons, err := kgo.NewClient(c.clientOpts(
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		// A group that never committed reads from the start; one that did, from its
		// commit, which is before the record just produced.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return doc, fmt.Errorf("consumer: %w", err)
	}
	defer cons.Close() // leaves the group
	start = time.Now()
	var got *kgo.Record
	for got == nil {
		fetches := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			return doc, fmt.Errorf("fetch the produced record in group %s: %w", group, ctx.Err())
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			e := errs[0]
			if !kerr.IsRetriable(e.Err) {
				return doc, fmt.Errorf("fetch %s/%d in group %s: %w", e.Topic, e.Partition, group, e.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if got == nil && r.Partition == rec.Partition && r.Offset == rec.Offset && string(r.Value) == value {
				got = r
			}
		})
	}
	member, gen := cons.GroupMetadata()
	doc.Generation = gen
	step("join", fmt.Sprintf("group %s generation %d member %s", group, gen, bounded(member)), start)
	step("fetch", fmt.Sprintf("%s/%d offset %d", topic, got.Partition, got.Offset), start)

	start = time.Now()
	if err := cons.CommitRecords(ctx, got); err != nil {
		return doc, fmt.Errorf("commit in group %s: %w", group, err)
	}
	step("commit", fmt.Sprintf("%s/%d offset %d", topic, got.Partition, got.Offset+1), start)

	start = time.Now()
	offs, err := c.adm.FetchOffsets(ctx, group)
	if err != nil {
		return doc, fmt.Errorf("read the commit of group %s: %w", group, err)
	}
	o, ok := offs.Lookup(topic, got.Partition)
	switch {
	case !ok:
		return doc, fmt.Errorf("group %s has no commit for %s/%d", group, topic, got.Partition)
	case o.Err != nil:
		return doc, fmt.Errorf("read the commit of group %s for %s/%d: %w", group, topic, got.Partition, o.Err)
	case o.At < got.Offset+1:
		return doc, fmt.Errorf("group %s committed %d for %s/%d, want at least %d", group, o.At, topic, got.Partition, got.Offset+1)
	}
	doc.Committed = o.At
	step("offset-fetch", fmt.Sprintf("%s/%d committed %d", topic, got.Partition, o.At), start)
	return doc, nil
}

// clientOpts are the options of a client made next to the admin one: the same seeds,
// timeouts and dial error record, plus opts.
func (c *cmd) clientOpts(opts ...kgo.Opt) []kgo.Opt {
	var seeds []string
	for _, s := range strings.Split(c.bootstrap, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	return append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("kaas-probe"),
		kgo.DialTimeout(min(c.timeout, 10*time.Second)),
		kgo.RetryTimeout(c.timeout),
		kgo.WithHooks(c.dialed),
	}, opts...)
}
