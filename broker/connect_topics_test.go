package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// connectTopics are Kafka Connect's internal topics as a distributed worker creates them
// (config.storage.topic: one partition; offset.storage.topic and status.storage.topic:
// several), each cleanup.policy=compact. The partition counts are Connect's defaults cut
// down.
var connectTopics = map[string]int32{"connect-configs": 1, "connect-offsets": 5, "connect-status": 3}

// cleanedPartitions is each topic partition with a compaction pass on this broker, from
// kaas_log_cleaner_last_clean_timestamp_seconds.
func cleanedPartitions(t *testing.T, b *broker.Broker) map[string]bool {
	t.Helper()
	fams, err := b.Env().Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		if f.GetName() != "kaas_log_cleaner_last_clean_timestamp_seconds" {
			continue
		}
		for _, m := range f.Metric {
			var topic, part string
			for _, l := range m.Label {
				switch l.GetName() {
				case "topic":
					topic = l.GetValue()
				case "partition":
					part = l.GetValue()
				}
			}
			out[topic+"/"+part] = true
		}
	}
	return out
}

// TestConnectTopicsKeepNewestValues is what a Kafka Connect cluster asks of its internal
// topics: created compacted with short retention.ms and small segments, written with
// keys overwritten (connector configs, source offsets, task statuses) and a tombstone (a
// deleted connector), with every record older than retention.ms. A delete-policy topic
// written the same way loses its old segments, so time is past retention; the compacted
// ones, once cleaned, still hold every key's newest value (and the tombstone), before and
// after a restart.
func TestConnectTopicsKeepNewestValues(t *testing.T) {
	c := brokertest.Config(t)
	c.LogRetentionCheck = 20 * time.Millisecond
	b := brokertest.StartWith(t, c)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cl.Close() }() // the client of the restarted broker
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	short := map[string]*string{
		"retention.ms":              kmsg.StringPtr("1000"),
		"segment.bytes":             kmsg.StringPtr("512"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0.01"),
	}
	for name, parts := range connectTopics {
		cfg := map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}
		for k, v := range short {
			cfg[k] = v
		}
		if r, err := adm.CreateTopic(ctx, parts, 1, cfg, name); err != nil || r.Err != nil {
			t.Fatalf("create %s: %v %v", name, err, r.Err)
		}
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, short, "plain"); err != nil || r.Err != nil {
		t.Fatalf("create plain: %v %v", err, r.Err)
	}

	// Every record is two hours old: past retention.ms at the first retention check.
	old := time.Now().Add(-2 * time.Hour)
	type tpk struct {
		topic string
		part  int32
		key   string
	}
	newest := map[tpk]*string{} // nil: a tombstone
	write := func(topic string, part int32, key string, value *string) {
		t.Helper()
		r := &kgo.Record{Topic: topic, Partition: part, Key: []byte(key), Timestamp: old}
		if value != nil {
			r.Value = []byte(*value)
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %s/%d %s: %v", topic, part, key, err)
		}
		if topic != "plain" {
			newest[tpk{topic, part, key}] = value
		}
	}
	for round := 0; round < 8; round++ {
		for _, conn := range []string{"jdbc-source", "s3-sink", "mirror"} {
			v := fmt.Sprintf(`{"connector.class":"%s","tasks.max":"%d","rev":%d}`, conn, round%3+1, round)
			write("connect-configs", 0, "connector-"+conn, &v)
			for task := 0; task < 2; task++ {
				tv := fmt.Sprintf(`{"task":%d,"rev":%d}`, task, round)
				write("connect-configs", 0, fmt.Sprintf("task-%s-%d", conn, task), &tv)
			}
			sv := fmt.Sprintf(`{"state":"RUNNING","trace":null,"worker_id":"w%d","generation":%d}`, round%2, round)
			write("connect-status", int32(len(conn))%connectTopics["connect-status"], "status-connector-"+conn, &sv)
		}
		for p := int32(0); p < connectTopics["connect-offsets"]; p++ {
			ov := fmt.Sprintf(`{"offset":%d}`, round*100+int(p))
			write("connect-offsets", p, fmt.Sprintf(`["jdbc-source",{"table":"t%d"}]`, p), &ov)
		}
		commit := fmt.Sprintf(`{"tasks":2,"rev":%d}`, round)
		write("connect-configs", 0, "commit-jdbc-source", &commit)
		pv := fmt.Sprintf("plain-%d", round)
		write("plain", 0, "k", &pv)
	}
	write("connect-configs", 0, "connector-mirror", nil) // the connector deleted
	// A few more, so the newest values above leave the active segments.
	for i := 0; i < 6; i++ {
		fv := fmt.Sprintf(`{"filler":%d}`, i)
		write("connect-configs", 0, "session-key", &fv)
		for p := int32(0); p < connectTopics["connect-offsets"]; p++ {
			write("connect-offsets", p, "filler", &fv)
		}
		for p := int32(0); p < connectTopics["connect-status"]; p++ {
			write("connect-status", p, "filler", &fv)
		}
	}

	// Retention ran: the delete-policy topic lost its old segments.
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if s := startOffset(t, adm, "plain"); s == 0 {
			return fmt.Errorf("plain: start offset %d, retention has not run", s)
		}
		return nil
	})
	// Every Connect partition has been cleaned, each pass on a retention tick at which a
	// delete policy would have deleted its segments.
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		cleaned := cleanedPartitions(t, b)
		for name, parts := range connectTopics {
			for p := int32(0); p < parts; p++ {
				if s := startOffsetOf(t, adm, name, p); s != 0 {
					t.Fatalf("%s/%d: log start offset %d: retention deleted a compacted topic's records", name, p, s)
				}
				if !cleaned[name+"/"+strconv.Itoa(int(p))] {
					return fmt.Errorf("%s/%d not cleaned yet", name, p)
				}
			}
		}
		return nil
	})

	check := func(addr string) {
		t.Helper()
		for name, parts := range connectTopics {
			for p := int32(0); p < parts; p++ {
				ends, err := adm.ListEndOffsets(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				end, _ := ends.Lookup(name, p)
				if s := startOffsetOf(t, adm, name, p); s != 0 {
					t.Fatalf("%s/%d: log start offset %d: compaction never moves it", name, p, s)
				}
				recs := consumePartition(ctx, t, addr, name, p, end.Offset)
				got := map[string]*string{}
				last := int64(-1)
				for _, r := range recs {
					if r.Offset <= last {
						t.Fatalf("%s/%d: offset %d after %d", name, p, r.Offset, last)
					}
					last = r.Offset
					if r.Value == nil {
						got[string(r.Key)] = nil
					} else {
						v := string(r.Value)
						got[string(r.Key)] = &v
					}
				}
				for k, want := range newest {
					if k.topic != name || k.part != p {
						continue
					}
					v, ok := got[k.key]
					switch {
					case !ok:
						t.Fatalf("%s/%d: key %s gone", name, p, k.key)
					case (v == nil) != (want == nil) || (v != nil && *v != *want):
						t.Fatalf("%s/%d: key %s reads %v, want %v", name, p, k.key, deref(v), deref(want))
					}
				}
			}
		}
	}
	check(b.Addr())

	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := b.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	b = brokertest.StartWith(t, c)
	cl.Close()
	cl, err = kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	adm = kadm.NewClient(cl)
	check(b.Addr())
}

func deref(s *string) string {
	if s == nil {
		return "<tombstone>"
	}
	return *s
}

func startOffsetOf(t *testing.T, adm *kadm.Client, topic string, p int32) int64 {
	t.Helper()
	l, err := adm.ListStartOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := l.Lookup(topic, p)
	if !ok || o.Err != nil {
		t.Fatalf("earliest of %s/%d: %+v", topic, p, o)
	}
	return o.Offset
}

// consumePartition reads topic's partition p from the start up to offset end
// (exclusive); the last record before end is never cleaned (the active segment).
func consumePartition(ctx context.Context, t *testing.T, addr, topic string, p int32, end int64) []*kgo.Record {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {p: kgo.NewOffset().AtStart()},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var out []*kgo.Record
	for done := end == 0; !done; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("%s/%d: poll: %v", topic, p, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			done = done || r.Offset >= end-1
		})
	}
	return out
}
