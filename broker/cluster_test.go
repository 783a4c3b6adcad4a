package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
	"kaas/registry"
)

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// clusterConfigs are the configs of n brokers of a static cluster on one data dir.
func clusterConfigs(t *testing.T, n int) []config.Config {
	ports := freePorts(t, n)
	dir := t.TempDir()
	var peers []config.Peer
	for i, p := range ports {
		peers = append(peers, config.Peer{ID: int32(i), Host: "127.0.0.1", Port: p})
	}
	var cfgs []config.Config
	for i, p := range ports {
		c := brokertest.Config(t)
		c.DataDir = dir
		c.NodeID = int32(i)
		c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: p}}
		c.Registry = "static"
		c.RegistryPeers = peers
		c.ClusterSize = n
		c.RegistryProbe = 50 * time.Millisecond
		c.LeaseDuration = 1200 * time.Millisecond
		c.LeaseRenew = 200 * time.Millisecond
		c.OffsetsCheckpointInterval = time.Hour // commits stay in the journal only
		cfgs = append(cfgs, c)
	}
	return cfgs
}

// groupOf finds a group id that hashes to broker id in a cluster of n.
func groupOf(id int32, n int, prefix string) string {
	for i := 0; ; i++ {
		g := fmt.Sprintf("%s-%d", prefix, i)
		if registry.Hash(g)%uint32(n) == uint32(id) {
			return g
		}
	}
}

func waitReady(t *testing.T, bs ...*broker.Broker) {
	t.Helper()
	testwait.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		for _, b := range bs {
			if err := b.Ready(); err != nil {
				return fmt.Errorf("broker not ready: %w", err)
			}
		}
		return nil
	})
}

func findCoordinator(t *testing.T, cl *kgo.Client, g string) (int32, int16) {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = g
	req.CoordinatorKeys = []string{g}
	r, err := cl.SeedBrokers()[0].Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.FindCoordinatorResponse)
	if len(resp.Coordinators) == 1 { // v4+
		return resp.Coordinators[0].NodeID, resp.Coordinators[0].ErrorCode
	}
	return resp.NodeID, resp.ErrorCode
}

func commitCode(t *testing.T, cl *kgo.Client, g, topic string, offset int64) int16 {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = g, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	r, err := cl.SeedBrokers()[0].Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// Two brokers on one data dir route every group to one of them, answer NOT_COORDINATOR
// for the other's, and when one stops the other takes its groups over with every
// acknowledged commit — read from the stopped broker's journal, since checkpoints are off.
func TestClusterRoutesGroupsAndTakesOverOnStop(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	adm := kadm.NewClient(mustClient(t, a.Addr()))
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)

	ga, gb := groupOf(0, 2, "ga"), groupOf(1, 2, "gb")
	ca := directClient(t, a.Addr())
	cb := directClient(t, b.Addr())
	if node, code := findCoordinator(t, cb, ga); code != 0 || node != 0 {
		t.Fatalf("FindCoordinator(%s) on broker 1 = node %d code %d, want node 0", ga, node, code)
	}
	// Wait for both to have seen each other's published view.
	// The three waits share one deadline.
	deadline := time.Now().Add(10 * time.Second)
	testwait.For(t, time.Until(deadline), 20*time.Millisecond, func() error {
		if code := commitCode(t, ca, ga, "orders", 42); code != 0 {
			return fmt.Errorf("commit on the coordinator never succeeded: code %d", code)
		}
		return nil
	})
	// Until broker 0 sees broker 1 alive it coordinates gb as well (the fallback);
	// then it lets gb go, and broker 1 serves it with what broker 0 acknowledged.
	testwait.For(t, time.Until(deadline), 20*time.Millisecond, func() error {
		switch code := commitCode(t, ca, gb, "orders", 7); code {
		case kerr.NotCoordinator.Code:
			return nil
		case 0:
			return errors.New("commit of broker 1's group on broker 0: still 0, want NOT_COORDINATOR")
		default:
			t.Fatalf("commit of broker 1's group on broker 0: code %d, want 0 then NOT_COORDINATOR", code)
			return nil
		}
	})
	testwait.For(t, time.Until(deadline), 20*time.Millisecond, func() error {
		switch code := commitCode(t, cb, gb, "orders", 8); code {
		case 0:
			return nil
		case kerr.CoordinatorLoadInProgress.Code:
			return errors.New("commit of gb on broker 1: still LOAD_IN_PROGRESS, want 0")
		default:
			t.Fatalf("commit of gb on broker 1: code %d, want LOAD_IN_PROGRESS then 0", code)
			return nil
		}
	})
	if code := commitCode(t, cb, ga, "orders", 7); code != kerr.NotCoordinator.Code {
		t.Fatalf("commit of broker 0's group on broker 1: code %d, want NOT_COORDINATOR", code)
	}

	// Broker 0 stops: broker 1 adopts ga with its commit.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	admB := kadm.NewClient(mustClient(t, b.Addr()))
	testwait.For(t, 15*time.Second, 20*time.Millisecond, func() error {
		node, code := findCoordinator(t, cb, ga)
		if code == 0 && node == 1 {
			offs, err := admB.FetchOffsets(context.Background(), ga)
			if err == nil {
				if o, ok := offs.Lookup("orders", 0); ok && o.At == 42 {
					return nil
				}
			}
		}
		return fmt.Errorf("broker 1 did not take %s over with offset 42 (coordinator %d, code %d, view %+v)", ga, node, code, b.Env().Ownership().View)
	})
}

func mustClient(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// directClient is a client whose requests the tests send to its seed broker itself
// (SeedBrokers()[0].Request), not to wherever the client would route them.
func directClient(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	// The raw OffsetCommit and OffsetFetch requests of these tests name topics, as v9
	// does (v10 names them by id).
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(8, 9)
	versions.SetMaxKeyVersion(9, 9)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(versions))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// A real producer and consumer group on a two-broker cluster: partitions are led by both
// brokers, every acknowledged record is consumed, and after one broker stops the other
// leads every partition with the records the stopped one had acknowledged.
func TestClusterProduceConsumeAcrossBrokersAndFailover(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	seeds := kgo.SeedBrokers(a.Addr(), b.Addr())
	adm, err := kgo.NewClient(seeds)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	end, _ := ctx.Deadline() // the polls below share the test's deadline
	testwait.For(t, time.Until(end), 50*time.Millisecond, func() error {
		resp, err := kadm.NewClient(adm).CreateTopic(ctx, 4, 1, nil, "events")
		if err != nil || resp.Err != nil {
			return fmt.Errorf("create topic: %v %v", err, resp.Err)
		}
		return nil
	})
	prod, err := kgo.NewClient(seeds, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("events"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			if err := prod.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	// Once both brokers see each other, both lead some partitions, and both answer the
	// same leader and leader epoch for each (a broker that does not lead a partition
	// reads its epoch from the shared volume within a second).
	moved := map[int32]bool{}
	before := map[int32]int32{}
	answers := func(addr string) map[int32][2]int32 {
		md, err := kadm.NewClient(directClient(t, addr)).Metadata(ctx, "events")
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32][2]int32{}
		for _, p := range md.Topics["events"].Partitions {
			out[p.Partition] = [2]int32{p.Leader, p.LeaderEpoch}
		}
		return out
	}
	testwait.For(t, time.Until(end), 20*time.Millisecond, func() error {
		fromA, fromB := answers(a.Addr()), answers(b.Addr())
		leaders := map[int32]bool{}
		for _, le := range fromB {
			leaders[le[0]] = true
		}
		if leaders[0] && leaders[1] && maps.Equal(fromA, fromB) && len(fromB) == 4 {
			for p, le := range fromB {
				before[p], moved[p] = le[1], le[0] == 0
			}
			return nil
		}
		return fmt.Errorf("brokers answer %v and %v: want the same leaders and epochs, both brokers leading some", fromA, fromB)
	})
	produce(0, 40)
	// Broker 0 stops; the producer goes on against broker 1 alone.
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := a.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	produce(40, 60)
	// The partitions that moved are led at the next epoch, the others at the same.
	md, err := kadm.NewClient(directClient(t, b.Addr())).Metadata(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range md.Topics["events"].Partitions {
		want := before[p.Partition]
		if moved[p.Partition] {
			want++
		}
		if p.Leader != 1 || p.LeaderEpoch != want {
			t.Fatalf("after the stop, partition %d led by %d at epoch %d, want broker 1 at %d", p.Partition, p.Leader, p.LeaderEpoch, want)
		}
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("events"), kgo.ConsumerGroup("readers"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < 60 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 60 records", len(seen))
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)] = true
			// Records carry the epoch of the leader that wrote them.
			v, _ := strconv.Atoi(string(r.Value))
			if v >= 40 && moved[r.Partition] && r.LeaderEpoch != before[r.Partition]+1 {
				t.Errorf("record %s on partition %d (moved: %v) has leader epoch %d", r.Value, r.Partition, moved[r.Partition], r.LeaderEpoch)
			}
		})
	}
}

// A topic created through the broker that writes the catalogue is known on the other
// broker at its next request, not at its next catalogue tick (a second later): Metadata
// names it, and a commit to it for a group that broker coordinates is taken. Both
// answered UNKNOWN_TOPIC_OR_PARTITION in that second.
func TestClusterNewTopicKnownOnEveryBroker(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	ctx := context.Background()
	meta := func(cl *kgo.Client, topics ...string) *kmsg.MetadataResponse {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		for _, name := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, rt)
		}
		r, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*kmsg.MetadataResponse)
	}
	writer := meta(directClient(t, a.Addr())).ControllerID
	brokers := []*broker.Broker{a, b}
	other := brokers[1-writer]
	adm := kadm.NewClient(mustClient(t, brokers[writer].Addr()))
	cl := directClient(t, other.Addr())
	create := func(name string) {
		t.Helper()
		if r, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil || r.Err != nil {
			t.Fatalf("create %s: %v %v", name, err, r.Err)
		}
	}
	// First the group is served on its broker (both brokers have settled the view),
	// with a topic both know.
	create("warm")
	g := groupOf(int32(1-writer), 2, "g")
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if code := commitCode(t, cl, g, "warm", 1); code != 0 {
			return fmt.Errorf("group %s never served: %w", g, kerr.ErrorForCode(code))
		}
		return nil
	})
	// Each path is asked first about a topic of its own: one answer must not rely on
	// another's re-read.
	create("orders")
	if code := commitCode(t, cl, g, "orders", 5); code != 0 {
		t.Fatalf("broker %d right after orders was created: commit for %s: %v", 1-writer, g, kerr.ErrorForCode(code))
	}
	// OffsetCommit v10 names the topic by id only: the id of a topic just created
	// through the other broker is resolved the same way.
	td, err := adm.CreateTopic(ctx, 1, 1, nil, "returns")
	if err != nil || td.Err != nil {
		t.Fatalf("create returns: %v %v", err, td.Err)
	}
	byID := kmsg.NewPtrOffsetCommitRequest()
	byID.Group, byID.Generation = g, -1
	byID.Topics = []kmsg.OffsetCommitRequestTopic{{TopicID: td.ID, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 3, LeaderEpoch: -1}}}}
	if r := request[*kmsg.OffsetCommitResponse](t, other.Addr(), byID, 10); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("broker %d right after returns was created: commit by id for %s: %v", 1-writer, g, kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	create("payments")
	if m := meta(cl, "payments"); len(m.Topics) != 1 || m.Topics[0].ErrorCode != 0 {
		t.Fatalf("broker %d right after payments was created: Metadata %+v", 1-writer, m.Topics)
	}
	// A listing of every topic (kaas topics list) after a create and after a delete.
	listed := func() []string {
		var names []string
		for _, mt := range meta(cl).Topics {
			names = append(names, *mt.Topic)
		}
		slices.Sort(names)
		return names
	}
	create("refunds")
	if got := listed(); !slices.Equal(got, []string{"orders", "payments", "refunds", "returns", "warm"}) {
		t.Fatalf("broker %d right after refunds was created lists %v", 1-writer, got)
	}
	if r, err := adm.DeleteTopic(ctx, "orders"); err != nil || r.Err != nil {
		t.Fatalf("delete orders: %v %v", err, r.Err)
	}
	if got := listed(); !slices.Equal(got, []string{"payments", "refunds", "returns", "warm"}) {
		t.Fatalf("broker %d right after orders was deleted lists %v", 1-writer, got)
	}
}

// Shrinking a cluster, rolled: broker 2 restarts on three brokers while broker 3, being
// scaled away, still runs on four. Broker 2 waits for what broker 3 still serves, and once
// broker 3 has stopped it serves it with broker 3's commit. Before, broker 2 took broker 3
// (beyond its size) for gone at once, and both served the group.
func TestClusterShrinkWaitsForBrokerBeyondSize(t *testing.T) {
	cfgs := clusterConfigs(t, 4)
	four := registry.View{Size: 4, Alive: []int32{2, 3}}
	three := registry.View{Size: 3, Alive: []int32{2}}
	back, stays := "", ""
	for i := 0; back == "" || stays == ""; i++ {
		g := fmt.Sprintf("g-%d", i)
		o4, _ := four.GroupOwner(g)
		o3, _ := three.GroupOwner(g)
		switch {
		case o4 == 3 && o3 == 2 && back == "":
			back = g
		case o4 == 2 && o3 == 2 && stays == "":
			stays = g
		}
	}
	b3 := brokertest.StartWith(t, cfgs[3])
	waitReady(t, b3)
	adm := kadm.NewClient(mustClient(t, b3.Addr()))
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	c3 := directClient(t, b3.Addr())
	deadline := time.Now().Add(10 * time.Second)
	testwait.For(t, time.Until(deadline), 20*time.Millisecond, testwait.Cond("commit on broker 3 never succeeded", func() bool {
		return commitCode(t, c3, back, "orders", 300) == 0
	}))

	small := cfgs[2]
	small.ClusterSize, small.RegistryPeers = 3, cfgs[2].RegistryPeers[:3]
	// The operator's first step of a resize: the recorded size (a broker on another
	// refuses to start).
	if err := os.WriteFile(filepath.Join(small.DataDir, "__cluster", "cluster.size"), []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b2 := brokertest.StartWith(t, small)
	waitReady(t, b2)
	c2 := directClient(t, b2.Addr())
	testwait.For(t, time.Until(deadline.Add(10*time.Second)), 20*time.Millisecond, testwait.Cond("broker 2 never served "+stays, func() bool {
		return commitCode(t, c2, stays, "orders", 1) == 0
	}))
	// Broker 2 serves, its peers' views read: broker 3's claim on back holds it off.
	if code := commitCode(t, c2, back, "orders", 301); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("commit of %s on broker 2 while broker 3 serves it: code %d, want COORDINATOR_LOAD_IN_PROGRESS", back, code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b3.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	adm2 := kadm.NewClient(mustClient(t, b2.Addr()))
	testwait.For(t, 15*time.Second, 20*time.Millisecond, func() error {
		offs, err := adm2.FetchOffsets(context.Background(), back)
		if err == nil {
			if o, ok := offs.Lookup("orders", 0); ok && o.At == 300 {
				return nil
			}
		}
		return fmt.Errorf("broker 2 did not take %s over with broker 3's commit 300 (%v)", back, err)
	})
}

// TestClusterReadyzSettled: /readyz?settled answers 200 on both brokers of a cluster only
// once ownership is at rest, and then every partition has the same leader on both
// brokers' Metadata and a group's coordinator takes its commit at the first try.
func TestClusterReadyzSettled(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	for i := range cfgs {
		cfgs[i].HTTPListen = "127.0.0.1:0"
	}
	a := brokertest.StartWith(t, cfgs[0])
	adm := kadm.NewClient(mustClient(t, a.Addr()))
	if _, err := adm.CreateTopic(context.Background(), 8, 1, nil, "settled"); err != nil {
		t.Fatal(err)
	}
	b := brokertest.StartWith(t, cfgs[1])
	get := func(br *broker.Broker, path string) (int, string) {
		resp, err := http.Get("http://" + br.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	testwait.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		for _, br := range []*broker.Broker{a, b} {
			if code, body := get(br, "/readyz?settled"); code != 200 {
				return fmt.Errorf("readyz?settled %d %s", code, body)
			}
		}
		return nil
	})
	leaders := func(addr string) map[int32]int32 {
		m, err := kadm.NewClient(directClient(t, addr)).Metadata(context.Background(), "settled")
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int32{}
		for _, p := range m.Topics["settled"].Partitions {
			out[p.Partition] = p.Leader
		}
		return out
	}
	la, lb := leaders(a.Addr()), leaders(b.Addr())
	for p := int32(0); p < 8; p++ {
		if la[p] < 0 || la[p] != lb[p] {
			t.Fatalf("partition %d: leader %d on broker 0, %d on broker 1 after both settled", p, la[p], lb[p])
		}
	}
	gb := groupOf(1, 2, "settled")
	if code := commitCode(t, directClient(t, b.Addr()), gb, "settled", 1); code != 0 {
		t.Fatalf("commit on the settled coordinator: code %d", code)
	}
}
