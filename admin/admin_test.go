package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	kproc "kaas/e2e/proc"
	"kaas/internal/testwait"
)

// startCluster runs three in-process brokers of a static cluster on one data dir and
// returns broker 0's address once every broker is ready.
func startCluster(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var ports []int
	var peers []config.Peer
	for i := range 3 {
		p := kproc.FreePort(t)
		ports = append(ports, p)
		peers = append(peers, config.Peer{ID: int32(i), Host: "127.0.0.1", Port: p})
	}
	var bs []*broker.Broker
	for i, p := range ports {
		c := brokertest.Config(t)
		c.DataDir, c.NodeID = dir, int32(i)
		c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: p}}
		c.Registry, c.RegistryPeers, c.ClusterSize = "static", peers, 3
		c.RegistryProbe = 50 * time.Millisecond
		bs = append(bs, brokertest.StartWith(t, c))
	}
	// Ready, and routing by a view with all three brokers: a broker that started first
	// serves everything as the fallback until it has seen the others, then hands over,
	// and a scenario run across that hand-over would see its partition move mid-way.
	testwait.For(t, 30*time.Second, 10*time.Millisecond, func() error {
		for _, b := range bs {
			if err := b.Ready(); err != nil || !allAlive(b, 3) {
				return fmt.Errorf("cluster broker not ready with every broker in its view: %v", err)
			}
		}
		return nil
	})
	return bs[0].Addr()
}

// allAlive reports whether b routes by a view with n brokers alive.
func allAlive(b *broker.Broker, n int) bool {
	st := b.Env().Ownership()
	return st != nil && st.Ready && len(st.View.Alive) == n
}

// clusters are the servers every scenario runs against: an in-process kaas broker, three
// kaas brokers of one cluster (static registry, one data dir; the tool is pointed at
// broker 0 and must follow the cluster to each group's coordinator and the catalogue's
// writer), and franz-go's kfake, each on 127.0.0.1.
var clusters = []struct {
	name  string
	start func(t *testing.T) string
}{
	{"kaas", func(t *testing.T) string { return brokertest.Start(t, nil).Addr() }},
	{"kaas-cluster", startCluster},
	{"kfake", func(t *testing.T) string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()[0]
	}},
}

const (
	topic      = "orders"
	partitions = 3
	perPart    = 10
)

// baseline is what the scenario commits for group g before each step that changes it.
var baseline = map[int32]int64{0: 4, 1: 10, 2: 0}

type result struct {
	code           int
	stdout, stderr string
}

func run(args ...string) result {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// on runs a command against addr.
func on(addr string, args ...string) result {
	return run(append(args, "--bootstrap-server", addr, "--timeout", "20s")...)
}

func (r result) must(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	if code != 0 {
		if lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n"); r.stderr == "" || !strings.HasPrefix(lines[0], "kaas: ") {
			t.Fatalf("stderr of a failure is %q, want lines `kaas: <what>: <why>`", r.stderr)
		}
	}
	return r
}

// rows parses an aligned table into one map per row, keyed by the header's columns.
func rows(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("no table in %q", out)
	}
	head := strings.Fields(lines[0])
	var rs []map[string]string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		r := map[string]string{}
		for i, h := range head {
			if i < len(f) {
				r[h] = f[i]
			}
		}
		rs = append(rs, r)
	}
	return rs
}

func find(rs []map[string]string, kv ...string) map[string]string {
next:
	for _, r := range rs {
		for i := 0; i < len(kv); i += 2 {
			if r[kv[i]] != kv[i+1] {
				continue next
			}
		}
		return r
	}
	return nil
}

type fixture struct {
	addr string
	adm  *kadm.Client
	base time.Time // the timestamp of each partition's first record; record i is base + i s
}

func setup(t *testing.T, addr string) *fixture {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	ctx := testCtx(t)
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	f := &fixture{addr: addr, adm: adm, base: time.Now().Add(-time.Hour).Truncate(time.Second)}
	var recs []*kgo.Record
	for p := int32(0); p < partitions; p++ {
		for i := 0; i < perPart; i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(strconv.Itoa(i)),
				Timestamp: f.base.Add(time.Duration(i) * time.Second)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return f
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (f *fixture) commit(t *testing.T, group string, at map[int32]int64) {
	t.Helper()
	var os kadm.Offsets
	for p, o := range at {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	if err := f.adm.CommitAllOffsets(testCtx(t), group, os); err != nil {
		t.Fatalf("commit %s: %v", group, err)
	}
}

func (f *fixture) committed(t *testing.T, group string) map[int32]int64 {
	t.Helper()
	rs, err := f.adm.FetchOffsets(testCtx(t), group)
	if err != nil {
		t.Fatalf("fetch offsets %s: %v", group, err)
	}
	got := map[int32]int64{}
	for _, r := range rs[topic] {
		if r.Err != nil {
			t.Fatalf("fetch offsets %s: %v", group, r.Err)
		}
		if r.At >= 0 {
			got[r.Partition] = r.At
		}
	}
	return got
}

func same(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// joined starts a consumer in group and returns once the group is Stable; the consumer
// leaves when the test ends.
func (f *fixture) joined(t *testing.T, group string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		d, err := f.adm.DescribeGroups(testCtx(t), group)
		if err == nil && d[group].State == "Stable" {
			return nil
		}
		return fmt.Errorf("group %s never became Stable: %v %+v", group, err, d)
	})
}

// joined848 starts a consumer on the consumer group protocol (KIP-848) in group and
// returns once ConsumerGroupDescribe shows it Stable; it leaves when the test ends.
func (f *fixture) joined848(t *testing.T, group string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ServerSideBalancer())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		d, err := f.adm.DescribeConsumerGroups(testCtx(t), group)
		if err == nil && d[group].State == "Stable" && len(d[group].Members) == 1 && d[group].Members[0].MemberEpoch == d[group].AssignmentEpoch {
			return nil
		}
		return fmt.Errorf("group %s never became Stable: %v %+v", group, err, d)
	})
}

func TestGroups(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t, c.start(t))
			a := f.addr
			f.commit(t, "g", baseline)

			t.Run("list", func(t *testing.T) {
				r := on(a, "groups", "list").must(t, 0)
				if find(rows(t, r.stdout), "GROUP", "g", "STATE", "Empty") == nil {
					t.Fatalf("list lacks g Empty:\n%s", r.stdout)
				}
				r = on(a, "groups", "list", "--json").must(t, 0)
				var doc struct {
					Groups []struct{ Group, State string }
				}
				if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Groups) != 1 || doc.Groups[0].Group != "g" {
					t.Fatalf("list --json: %v %s", err, r.stdout)
				}
			})

			t.Run("describe and lag", func(t *testing.T) {
				for _, verb := range []string{"describe", "lag"} {
					r := on(a, "groups", verb, "--group", "g").must(t, 0)
					rs := rows(t, r.stdout)
					for p, cur := range baseline {
						row := find(rs, "GROUP", "g", "TOPIC", topic, "PARTITION", fmt.Sprint(p))
						if row == nil || row["CURRENT-OFFSET"] != fmt.Sprint(cur) || row["LOG-END-OFFSET"] != fmt.Sprint(perPart) ||
							row["LAG"] != fmt.Sprint(perPart-cur) || row["CONSUMER-ID"] != "-" {
							t.Fatalf("%s: partition %d: %v in\n%s", verb, p, row, r.stdout)
						}
					}
				}
				r := on(a, "groups", "lag", "--group", "g", "--json").must(t, 0)
				var doc struct {
					Groups []struct {
						Group      string
						State      string
						TotalLag   int64 `json:"total_lag"`
						Partitions []struct {
							Topic     string
							Partition int32
							Current   *int64 `json:"current_offset"`
							End       int64  `json:"log_end_offset"`
							Lag       int64
						}
					}
				}
				if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Groups) != 1 {
					t.Fatalf("lag --json: %v %s", err, r.stdout)
				}
				g := doc.Groups[0]
				if g.TotalLag != 16 || len(g.Partitions) != partitions || g.State != "Empty" {
					t.Fatalf("lag --json: %+v", g)
				}
				r = on(a, "groups", "describe", "--group", "g", "--state").must(t, 0)
				if find(rows(t, r.stdout), "GROUP", "g", "STATE", "Empty", "#MEMBERS", "0") == nil {
					t.Fatalf("describe --state:\n%s", r.stdout)
				}
			})

			// A committed offset that is not a position (kafkajs's resetOffsets commits -2,
			// "earliest"; Apache stores it) shows as none, as kafka-consumer-groups shows
			// it: no current offset and no lag, the other partitions as usual.
			t.Run("negative committed offset", func(t *testing.T) {
				f.commit(t, "reset", map[int32]int64{0: -2, 1: 5})
				for _, verb := range []string{"describe", "lag"} {
					r := on(a, "groups", verb, "--group", "reset").must(t, 0)
					rs := rows(t, r.stdout)
					if row := find(rs, "GROUP", "reset", "TOPIC", topic, "PARTITION", "0"); row == nil || row["CURRENT-OFFSET"] != "-" || row["LAG"] != "-" {
						t.Fatalf("%s: partition 0 at -2: %v in\n%s", verb, row, r.stdout)
					}
					if row := find(rs, "GROUP", "reset", "TOPIC", topic, "PARTITION", "1"); row == nil || row["CURRENT-OFFSET"] != "5" || row["LAG"] != fmt.Sprint(perPart-5) {
						t.Fatalf("%s: partition 1 at 5: %v in\n%s", verb, row, r.stdout)
					}
				}
			})

			t.Run("reset-offsets", func(t *testing.T) {
				at := f.base.Add(5 * time.Second).UTC().Format(time.RFC3339Nano)
				for _, m := range []struct {
					args []string
					want map[int32]int64
				}{
					{[]string{"--to-earliest", "--topic", topic}, map[int32]int64{0: 0, 1: 0, 2: 0}},
					{[]string{"--to-latest", "--all-topics"}, map[int32]int64{0: 10, 1: 10, 2: 10}},
					{[]string{"--to-offset", "7", "--topic", topic + ":0,2"}, map[int32]int64{0: 7, 1: 10, 2: 7}},
					{[]string{"--to-offset", "99", "--topic", topic + ":0"}, map[int32]int64{0: 10, 1: 10, 2: 0}},
					{[]string{"--shift-by", "-2", "--topic", topic}, map[int32]int64{0: 2, 1: 8, 2: 0}},
					{[]string{"--shift-by", "3", "--topic", topic + ":0"}, map[int32]int64{0: 7, 1: 10, 2: 0}},
					{[]string{"--to-datetime", at, "--topic", topic}, map[int32]int64{0: 5, 1: 5, 2: 5}},
				} {
					f.commit(t, "g", baseline)
					args := append([]string{"groups", "reset-offsets", "--group", "g"}, m.args...)
					r := on(a, args...).must(t, 0)
					rs := rows(t, r.stdout)
					for p, want := range m.want {
						if want == baseline[p] {
							continue
						}
						if row := find(rs, "TOPIC", topic, "PARTITION", fmt.Sprint(p)); row == nil || row["NEW-OFFSET"] != fmt.Sprint(want) {
							t.Fatalf("%v: dry run partition %d: %v in\n%s", m.args, p, row, r.stdout)
						}
					}
					if got := f.committed(t, "g"); !same(got, baseline) {
						t.Fatalf("%v: a dry run changed the offsets to %v", m.args, got)
					}
					on(a, append(args, "--execute")...).must(t, 0)
					if got := f.committed(t, "g"); !same(got, m.want) {
						t.Fatalf("%v --execute: offsets %v, want %v", m.args, got, m.want)
					}
				}
			})

			t.Run("consumer protocol", func(t *testing.T) {
				if c.name == "kfake" {
					t.Skip("kfake's DescribeGroups answers a consumer-protocol group as classic")
				}
				f.joined848(t, "next")
				r := on(a, "groups", "describe", "--group", "next", "--members", "--json").must(t, 0)
				var doc struct {
					Groups []struct {
						Group, State    string
						GroupProtocol   string `json:"group_protocol"`
						GroupEpoch      *int32 `json:"group_epoch"`
						AssignmentEpoch *int32 `json:"assignment_epoch"`
						Members         []struct {
							MemberEpoch *int32 `json:"member_epoch"`
							MemberState string `json:"member_state"`
							Assignment  []struct{ Partitions []int32 }
							Target      []struct{ Partitions []int32 } `json:"target_assignment"`
						}
					}
				}
				if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Groups) != 1 {
					t.Fatalf("describe --json: %v %s", err, r.stdout)
				}
				g := doc.Groups[0]
				if g.GroupProtocol != "consumer" || g.State != "Stable" || g.GroupEpoch == nil || *g.GroupEpoch < 1 ||
					g.AssignmentEpoch == nil || len(g.Members) != 1 {
					t.Fatalf("describe --json: %s", r.stdout)
				}
				m := g.Members[0]
				if m.MemberEpoch == nil || *m.MemberEpoch != *g.AssignmentEpoch || m.MemberState != "stable" ||
					len(m.Assignment) != 1 || len(m.Assignment[0].Partitions) != partitions || len(m.Target) != 1 {
					t.Fatalf("member: %s", r.stdout)
				}
				r = on(a, "groups", "list").must(t, 0)
				if find(rows(t, r.stdout), "GROUP", "next", "TYPE", "consumer", "STATE", "Stable") == nil {
					t.Fatalf("list:\n%s", r.stdout)
				}
				r = on(a, "groups", "describe", "--group", "next", "--state").must(t, 0)
				if find(rows(t, r.stdout), "GROUP", "next", "GROUP-PROTOCOL", "consumer", "STATE", "Stable") == nil {
					t.Fatalf("describe --state:\n%s", r.stdout)
				}
				r = on(a, "groups", "describe", "--group", "next").must(t, 0)
				if row := find(rows(t, r.stdout), "GROUP", "next", "PARTITION", "0"); row == nil || row["CONSUMER-ID"] == "-" {
					t.Fatalf("describe offsets:\n%s", r.stdout)
				}
			})

			t.Run("refused for a group with members", func(t *testing.T) {
				f.commit(t, "busy", baseline)
				f.joined(t, "busy")
				r := on(a, "groups", "describe", "--group", "busy", "--members").must(t, 0)
				if m := find(rows(t, r.stdout), "GROUP", "busy"); m == nil || m["CONSUMER-ID"] == "" || m["#PARTITIONS"] != fmt.Sprint(partitions) {
					t.Fatalf("describe --members:\n%s", r.stdout)
				}
				r = on(a, "groups", "describe", "--group", "busy").must(t, 0)
				if m := find(rows(t, r.stdout), "PARTITION", "0"); m == nil || m["CONSUMER-ID"] == "-" || m["CLIENT-ID"] == "-" {
					t.Fatalf("describe of a Stable group lacks its consumer:\n%s", r.stdout)
				}
				r = on(a, "groups", "reset-offsets", "--group", "busy", "--to-earliest", "--topic", topic, "--execute").must(t, 1)
				if !strings.Contains(r.stderr, "Stable") || strings.Count(r.stderr, "\n") != 1 {
					t.Fatalf("refusal: %q", r.stderr)
				}
				if got := f.committed(t, "busy"); !same(got, baseline) {
					t.Fatalf("a refused reset changed the offsets to %v", got)
				}
				on(a, "groups", "delete", "--group", "busy").must(t, 1)
			})

			t.Run("delete-offsets and delete", func(t *testing.T) {
				f.commit(t, "g", baseline)
				on(a, "groups", "delete-offsets", "--group", "g", "--topic", topic+":0").must(t, 0)
				want := map[int32]int64{1: 10, 2: 0}
				if got := f.committed(t, "g"); !same(got, want) {
					t.Fatalf("after delete-offsets: %v, want %v", got, want)
				}
				on(a, "groups", "delete", "--group", "g").must(t, 0)
				r := on(a, "groups", "list").must(t, 0)
				if strings.Contains(r.stdout, "\ng ") {
					t.Fatalf("g still listed:\n%s", r.stdout)
				}
				on(a, "groups", "delete", "--group", "g").must(t, 1)
			})
		})
	}
}

func TestTopics(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			a := c.start(t)
			on(a, "topics", "create", "--topic", "t2", "--partitions", "2", "--replication-factor", "1",
				"--config", "retention.ms=3600000").must(t, 0)
			on(a, "topics", "create", "--topic", "t2", "--partitions", "2").must(t, 1)

			r := on(a, "topics", "list").must(t, 0)
			if find(rows(t, r.stdout), "TOPIC", "t2", "PARTITIONS", "2", "REPLICATION-FACTOR", "1") == nil {
				t.Fatalf("list:\n%s", r.stdout)
			}
			r = on(a, "topics", "describe", "--topic", "t2").must(t, 0)
			for p := 0; p < 2; p++ {
				if find(rows(t, r.stdout), "TOPIC", "t2", "PARTITION", fmt.Sprint(p)) == nil {
					t.Fatalf("describe lacks partition %d:\n%s", p, r.stdout)
				}
			}
			r = on(a, "topics", "describe", "--topic", "t2", "--json").must(t, 0)
			var doc struct {
				Topics []struct {
					Topic      string
					Partitions []struct{ Partition, Leader int32 }
					Configs    map[string]string
				}
			}
			if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Topics) != 1 ||
				len(doc.Topics[0].Partitions) != 2 || doc.Topics[0].Configs["retention.ms"] != "3600000" {
				t.Fatalf("describe --json: %v %s", err, r.stdout)
			}

			configs := func() map[string]string {
				t.Helper()
				r := on(a, "topics", "describe", "--topic", "t2", "--json").must(t, 0)
				var doc struct {
					Topics []struct{ Configs map[string]string }
				}
				if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Topics) != 1 {
					t.Fatalf("describe --json: %v %s", err, r.stdout)
				}
				return doc.Topics[0].Configs
			}
			on(a, "topics", "alter-config", "--topic", "t2", "--set", "retention.ms=7200000", "--set", "max.message.bytes=5000",
				"--validate-only").must(t, 0)
			if got := configs(); got["retention.ms"] != "3600000" || got["max.message.bytes"] != "" {
				t.Fatalf("configs after --validate-only: %v", got)
			}
			on(a, "topics", "alter-config", "--topic", "t2", "--set", "retention.ms=7200000", "--set", "max.message.bytes=5000").must(t, 0)
			if got := configs(); got["retention.ms"] != "7200000" || got["max.message.bytes"] != "5000" {
				t.Fatalf("configs after alter-config --set: %v", got)
			}
			on(a, "topics", "alter-config", "--topic", "t2", "--delete", "retention.ms").must(t, 0)
			if got := configs(); got["retention.ms"] != "" || got["max.message.bytes"] != "5000" {
				t.Fatalf("configs after alter-config --delete: %v", got)
			}
			on(a, "topics", "alter-config", "--topic", "nope", "--set", "retention.ms=1").must(t, 1)

			on(a, "topics", "delete", "--topic", "t2").must(t, 0)
			on(a, "topics", "describe", "--topic", "t2").must(t, 1)
			on(a, "topics", "delete", "--topic", "t2").must(t, 1)
		})
	}
}

// TestTopicsDeleteRecordsAndSizes: describe shows each partition's size from its
// leader's DescribeLogDirs; delete-records moves log start offsets to an offset or the
// high watermark and reports the low watermarks; an offset past the end fails.
func TestTopicsDeleteRecordsAndSizes(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			a := c.start(t)
			f := setup(t, a)
			r := on(a, "topics", "describe", "--topic", topic, "--json").must(t, 0)
			var doc struct {
				Topics []struct {
					Partitions []struct {
						Partition int32
						SizeBytes int64 `json:"size_bytes"`
					}
				}
			}
			if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Topics) != 1 || len(doc.Topics[0].Partitions) != partitions {
				t.Fatalf("describe --json: %v %s", err, r.stdout)
			}
			for _, p := range doc.Topics[0].Partitions {
				if p.SizeBytes <= 0 {
					t.Fatalf("partition %d: size %d after %d records:\n%s", p.Partition, p.SizeBytes, perPart, r.stdout)
				}
			}
			r = on(a, "topics", "describe", "--topic", topic).must(t, 0)
			if find(rows(t, r.stdout), "TOPIC", topic, "PARTITION", "0", "SIZE", fmt.Sprint(doc.Topics[0].Partitions[0].SizeBytes)) == nil {
				t.Fatalf("describe lacks the size:\n%s", r.stdout)
			}

			starts := func() map[int32]int64 {
				t.Helper()
				l, err := f.adm.ListStartOffsets(testCtx(t), topic)
				if err != nil {
					t.Fatal(err)
				}
				got := map[int32]int64{}
				l.Each(func(o kadm.ListedOffset) { got[o.Partition] = o.Offset })
				return got
			}
			r = on(a, "topics", "delete-records", "--topic", topic, "--partition", "0", "--offset", "4").must(t, 0)
			if find(rows(t, r.stdout), "TOPIC", topic, "PARTITION", "0", "LOW-WATERMARK", "4", "STATUS", "ok") == nil {
				t.Fatalf("delete-records --offset 4:\n%s", r.stdout)
			}
			if got := starts(); !same(got, map[int32]int64{0: 4, 1: 0, 2: 0}) {
				t.Fatalf("start offsets after delete-records --partition 0 --offset 4: %v", got)
			}
			r = on(a, "topics", "delete-records", "--topic", topic, "--offset", "-1", "--json").must(t, 0)
			var del struct {
				Partitions []struct {
					Partition    int32
					LowWatermark int64 `json:"low_watermark"`
				}
			}
			if err := json.Unmarshal([]byte(r.stdout), &del); err != nil || len(del.Partitions) != partitions {
				t.Fatalf("delete-records --json: %v %s", err, r.stdout)
			}
			for _, p := range del.Partitions {
				if p.LowWatermark != perPart {
					t.Fatalf("delete-records --offset -1: %s", r.stdout)
				}
			}
			if got := starts(); !same(got, map[int32]int64{0: perPart, 1: perPart, 2: perPart}) {
				t.Fatalf("start offsets after delete-records --offset -1: %v", got)
			}
			on(a, "topics", "delete-records", "--topic", topic, "--partition", "1", "--offset", "99").must(t, 1)
			on(a, "topics", "delete-records", "--topic", "nope", "--offset", "1").must(t, 1)
		})
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"groups"},
		{"groups", "bogus"},
		{"topics", "bogus"},
		{"groups", "list", "--no-such-flag"},
		{"groups", "list", "extra"},
		{"groups", "describe"},
		{"groups", "reset-offsets", "--group", "g", "--topic", "t"},
		{"groups", "reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-latest"},
		{"groups", "reset-offsets", "--group", "g", "--to-earliest"},
		{"groups", "reset-offsets", "--group", "g", "--to-earliest", "--topic", "t", "--all-topics"},
		{"groups", "reset-offsets", "--group", "g", "--to-datetime", "yesterday", "--topic", "t"},
		{"groups", "reset-offsets", "--group", "g", "--to-earliest", "--topic", "t:x"},
		{"groups", "reset-offsets", "--group", "g", "--to-earliest", "--topic", "t", "--execute", "--dry-run"},
		{"groups", "delete-offsets", "--group", "g"},
		{"groups", "delete"},
		{"topics", "create"},
		{"topics", "create", "--topic", "t", "--config", "novalue"},
		{"topics", "delete"},
		{"topics", "alter-config", "--topic", "t"},
		{"topics", "alter-config", "--set", "a=b"},
		{"topics", "alter-config", "--topic", "t", "--set", "novalue"},
		{"topics", "delete-records", "--offset", "1"},
		{"topics", "delete-records", "--topic", "t"},
		{"topics", "delete-records", "--topic", "t", "--offset", "1", "--partition", "x"},
		{"groups", "list", "--timeout", "0s"},
		{"transactions", "describe"},
		{"transactions", "describe-producers", "--topic", "t"},
		{"transactions", "abort", "--topic", "t", "--partition", "0"},
		{"transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "1", "--producer-id", "5", "--producer-epoch", "0"},
		{"transactions", "abort", "--topic", "t", "--partition", "0", "--producer-id", "5"},
		{"transactions", "abort", "--transactional-id", "x", "--topic", "t"},
		{"transactions", "list", "--producer-id", "x"},
	} {
		r := run(args...)
		if r.code != 2 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "kaas: ") || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line `kaas: ...`", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{{"groups", "--help"}, {"topics", "-h"}, {"groups", "reset-offsets", "--help"}} {
		r := run(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage") {
			t.Errorf("%v: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
	if r := run("groups", "--help"); !strings.Contains(r.stdout, "reset-offsets") || !strings.Contains(r.stdout, "delete-offsets") {
		t.Errorf("groups --help lacks its subcommands:\n%s", r.stdout)
	}
}

func TestUnreachableExitsOne(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", kproc.FreePort(t))
	for _, args := range [][]string{{"groups", "list"}, {"topics", "list"}} {
		r := run(append(args, "--bootstrap-server", addr, "--timeout", "2s")...)
		if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "kaas: ") || !strings.Contains(r.stderr, addr) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and one line naming %s", args, r.code, r.stderr, addr)
		}
	}
}

// TestBinary runs the built kaas binary as a process: a subcommand's output and exit
// code end to end, and --help naming the subcommands.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kaas binary")
	}
	bin := kproc.Build(t)
	f := setup(t, brokertest.Start(t, nil).Addr())
	f.commit(t, "g", baseline)
	out, code := execute(t, bin, "groups", "lag", "--group", "g", "--bootstrap-server", f.addr)
	if code != 0 || find(rows(t, out), "PARTITION", "2", "LAG", "10") == nil {
		t.Fatalf("kaas groups lag: exit %d\n%s", code, out)
	}
	out, code = execute(t, bin, "topics", "describe", "--topic", "missing", "--bootstrap-server", f.addr)
	if code != 1 || !strings.HasPrefix(out, "kaas: ") {
		t.Fatalf("kaas topics describe missing: exit %d\n%s", code, out)
	}
	out, code = execute(t, bin, "groups", "reset-offsets")
	if code != 2 {
		t.Fatalf("kaas groups reset-offsets: exit %d\n%s", code, out)
	}
	out, code = execute(t, bin, "--help")
	if code != 0 || !strings.Contains(out, "kaas groups") || !strings.Contains(out, "kaas topics") || !strings.Contains(out, "kaas transactions") {
		t.Fatalf("kaas --help: exit %d, lacks the subcommands\n%s", code, out)
	}
}

func TestParseDatetime(t *testing.T) {
	local := time.Date(2024, 5, 1, 12, 30, 15, 250e6, time.Local).UnixMilli()
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"2024-05-01T12:00:00Z", time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).UnixMilli()},
		{"2024-05-01T12:00:00.5+02:00", time.Date(2024, 5, 1, 10, 0, 0, 500e6, time.UTC).UnixMilli()},
		{"2024-05-01T12:30:15.250", local},
		{"1714566615250", 1714566615250},
	} {
		if got, err := parseDatetime(c.in); err != nil || got != c.want {
			t.Errorf("parseDatetime(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "2024-13-01", "-5"} {
		if _, err := parseDatetime(bad); err == nil {
			t.Errorf("parseDatetime(%q) accepted", bad)
		}
	}
}
