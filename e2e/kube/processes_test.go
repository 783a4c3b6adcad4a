package kube

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kaas/e2e/proc"
	kubefence "kaas/fence/kube"
	"kaas/internal/testwait"
	"kaas/registry"
)

// procCluster is three kaas processes on one data dir, on the kubernetes registry of a
// real apiserver, reached on loopback through --registry.peers (the slice's pod IPs are
// fake and never dialled).
type procCluster struct {
	t     *testing.T
	bin   string
	data  string
	ports []int
	http  []int // /metrics
	kc    string
	procs []*proc.Broker
}

func (c *procCluster) peers() string {
	var ps []string
	for i, p := range c.ports {
		ps = append(ps, fmt.Sprintf("%d@127.0.0.1:%d", i, p))
	}
	return strings.Join(ps, ",")
}

func (c *procCluster) start(i int) {
	c.procs[i] = proc.Start(c.t, c.bin, c.data, c.ports[i],
		"--node.id="+strconv.Itoa(i), "--cluster.size="+strconv.Itoa(len(c.ports)),
		"--http.listen=127.0.0.1:"+strconv.Itoa(c.http[i]),
		"--registry=kubernetes", "--registry.service="+svc, "--registry.namespace="+ns,
		"--registry.kubeconfig="+c.kc, "--registry.peers="+c.peers(),
		"--lease.duration.ms=2000", "--lease.renew.interval.ms=400",
		"--group.initial.rebalance.delay.ms=0", "--offsets.checkpoint.interval.ms=500")
}

// client is a franz-go client that talks to the brokers by id.
func (c *procCluster) client() *kgo.Client {
	var seeds []string
	for _, p := range c.ports {
		seeds = append(seeds, "127.0.0.1:"+strconv.Itoa(p))
	}
	// The raw OffsetCommit and OffsetFetch requests name topics, as v9 does (v10 names
	// them by id).
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(8, 9)
	versions.SetMaxKeyVersion(9, 9)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequestRetries(0), kgo.MaxVersions(versions))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// identities are the Lease holder identities each broker logged, by node id.
func (c *procCluster) identities() map[int32]string {
	f, err := os.Open(c.procs[0].LogPath)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	out := map[int32]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Node      *int32 `json:"node_id"`
			Component string `json:"component"`
			Lease     string `json:"lease"`
			Identity  string `json:"identity"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Node == nil || l.Component != "fence_kube" {
			continue
		}
		if l.Lease == kubefence.LeaseName(svc, *l.Node) && l.Identity != "" {
			out[*l.Node] = l.Identity
		}
	}
	return out
}

// TestThreeProcessesOnKubernetesRegistry runs three kaas processes with
// --registry=kubernetes against a real apiserver: each holds its Lease, groups are
// routed by hash over the three, a broker whose endpoint stops serving hands its groups
// to a peer, and a broker killed with -9 has its Lease lapse and its groups served by a
// peer, each time with the committed offsets.
func TestThreeProcessesOnKubernetesRegistry(t *testing.T) {
	kc := Start(t, Options{})
	cs := kc.Client(t)
	ctx := context.Background()
	mustNamespace(t, cs)
	HeadlessService(t, cs, ns, svc, sts)
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, statefulSetSlice(true, true, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	c := &procCluster{t: t, bin: proc.Build(t), data: filepath.Join(dir, "data"), kc: kc.Kubeconfig}
	for range 3 {
		c.ports, c.http = append(c.ports, proc.FreePort(t)), append(c.http, proc.FreePort(t))
	}
	c.procs = make([]*proc.Broker, 3)
	for i := range c.procs {
		c.start(i)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("brokers' log (tail):\n%s", tail(c.procs[0].LogPath, 16<<10))
		}
	})

	// One Lease per broker, held by the identity that broker's process logged.
	testwait.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		ids := c.identities()
		ok := len(ids) == 3
		var why string
		for id := int32(0); id < 3 && ok; id++ {
			l, err := cs.CoordinationV1().Leases(ns).Get(ctx, kubefence.LeaseName(svc, id), metav1.GetOptions{})
			switch {
			case err != nil:
				ok, why = false, fmt.Sprintf("lease of broker %d: %v", id, err)
			case holder(l) != ids[id] || l.Labels[kubefence.LabelService] != svc:
				ok, why = false, fmt.Sprintf("lease of broker %d held by %q, labels %v; the broker logged %q", id, holder(l), l.Labels, ids[id])
			}
		}
		if !ok {
			return fmt.Errorf("leases: %s (identities logged %v)", why, ids)
		}
		return nil
	})

	cl := c.client()
	adm := kadm.NewClient(cl)
	const topic = "orders"
	waitFor(t, "topic created", func() (bool, string) {
		resp, err := adm.CreateTopic(ctx, 1, -1, nil, topic)
		if err == nil || errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return true, ""
		}
		return false, fmt.Sprint(err, resp.Err)
	})

	// A group coordinated by each broker, by the hash over all three.
	all := registry.View{Size: 3, Alive: []int32{0, 1, 2}}
	groups := map[int32]string{}
	for i := 0; len(groups) < 3; i++ {
		g := "group-" + strconv.Itoa(i)
		if o, _ := all.GroupOwner(g); groups[o] == "" {
			groups[o] = g
		}
	}
	for owner, g := range groups {
		for asked := int32(0); asked < 3; asked++ {
			waitCoordinator(t, cl, asked, g, func(id int32) bool { return id == owner })
		}
		waitFor(t, "commit on "+g, func() (bool, string) {
			return commit(ctx, cl, owner, g, topic, 42+int64(owner))
		})
		waitFetched(t, cl, owner, g, topic, 42+int64(owner))
	}

	// Broker 1's readiness fails: serving false in the slice. Its group moves to the
	// owner by the hash over {0, 2}, which serves the committed offset.
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Update(ctx, statefulSetSlice(true, false, true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	two := registry.View{Size: 3, Alive: []int32{0, 2}}
	g1 := groups[1]
	want1, _ := two.GroupOwner(g1)
	for _, asked := range []int32{0, 2} {
		waitCoordinator(t, cl, asked, g1, func(id int32) bool { return id == want1 })
	}
	waitFetched(t, cl, want1, g1, topic, 43)
	c.waitMoves(1, "group", "released")
	c.waitMoves(want1, "group", "adopted")
	for _, owner := range []int32{0, 2} { // the others' groups stay where they were
		waitCoordinator(t, cl, 0, groups[owner], func(id int32) bool { return id == owner })
		waitFetched(t, cl, owner, groups[owner], topic, 42+int64(owner))
	}

	// It serves again: the group comes back with its offset.
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Update(ctx, statefulSetSlice(true, true, true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for asked := int32(0); asked < 3; asked++ {
		waitCoordinator(t, cl, asked, g1, func(id int32) bool { return id == 1 })
	}
	waitFetched(t, cl, 1, g1, topic, 43)

	// kill -9 broker 2: nothing releases its Lease; it lapses (the peers clear its
	// holder) and its group is served by a peer with its committed offset.
	c.procs[2].Kill()
	waitFor(t, "broker 2's lease lapsed", func() (bool, string) {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, kubefence.LeaseName(svc, 2), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return holder(l) == "", "held by " + holder(l)
	})
	g2 := groups[2]
	want2, _ := registry.View{Size: 3, Alive: []int32{0, 1}}.GroupOwner(g2)
	for _, asked := range []int32{0, 1} {
		waitCoordinator(t, cl, asked, g2, func(id int32) bool { return id == want2 })
	}
	waitFetched(t, cl, want2, g2, topic, 44)
	// The survivors' own groups are still theirs.
	for _, owner := range []int32{0, 1} {
		waitFetched(t, cl, owner, groups[owner], topic, 42+int64(owner))
	}
}

// waitMoves waits until broker id's kaas_ownership_moves_total{kind, direction} is at
// least 1.
func (c *procCluster) waitMoves(id int32, kind, direction string) {
	c.t.Helper()
	series := fmt.Sprintf(`kaas_ownership_moves_total{direction=%q,kind=%q} `, direction, kind)
	waitFor(c.t, fmt.Sprintf("broker %d counts a %s %s", id, kind, direction), func() (bool, string) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(c.http[id]) + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), series); ok {
				n, err := strconv.ParseFloat(v, 64)
				return err == nil && n >= 1, sc.Text()
			}
		}
		return false, "no series " + series
	})
}

// waitFor polls cond until it holds, for 30 s at most, failing with what and cond's last
// word on why not.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if ok, why := cond(); !ok {
			return fmt.Errorf("%s: %s", what, why)
		}
		return nil
	})
}

// waitCoordinator waits until broker asked answers FindCoordinator for group g with a
// broker ok accepts.
func waitCoordinator(t *testing.T, cl *kgo.Client, asked int32, g string, ok func(int32) bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("broker %d names the coordinator of %s", asked, g), func() (bool, string) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType = 0
		req.CoordinatorKeys = []string{g}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl.Broker(int(asked)))
		if err != nil {
			return false, err.Error()
		}
		if len(resp.Coordinators) != 1 {
			return false, fmt.Sprintf("%d coordinators", len(resp.Coordinators))
		}
		co := resp.Coordinators[0]
		if co.ErrorCode != 0 {
			return false, kerr.ErrorForCode(co.ErrorCode).Error()
		}
		return ok(co.NodeID), fmt.Sprintf("node %d", co.NodeID)
	})
}

// commit commits offset for (topic, 0) in group g at broker id, as a client outside any
// generation does (kadm's CommitOffsets).
func commit(ctx context.Context, cl *kgo.Client, id int32, g, topic string, offset int64) (bool, string) {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = g
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 0, offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl.Broker(int(id)))
	if err != nil {
		return false, err.Error()
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		return false, kerr.ErrorForCode(code).Error()
	}
	return true, ""
}

// waitFetched waits until broker id answers OffsetFetch of group g with offset for
// (topic, 0).
func waitFetched(t *testing.T, cl *kgo.Client, id int32, g, topic string, offset int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("broker %d fetches %s's offset %d", id, g, offset), func() (bool, string) {
		// v8+ (batched groups, KIP-709): what kgo negotiates with kaas.
		req := kmsg.NewPtrOffsetFetchRequest()
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic = topic
		rt.Partitions = []int32{0}
		rg.Topics = append(rg.Topics, rt)
		req.Groups = append(req.Groups, rg)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
		if err != nil {
			return false, err.Error()
		}
		if len(resp.Groups) != 1 {
			return false, fmt.Sprintf("%d groups answered (version %d)", len(resp.Groups), resp.Version)
		}
		rg0 := resp.Groups[0]
		if rg0.ErrorCode != 0 {
			return false, kerr.ErrorForCode(rg0.ErrorCode).Error()
		}
		if len(rg0.Topics) != 1 || len(rg0.Topics[0].Partitions) != 1 {
			return false, fmt.Sprintf("answer %+v", rg0.Topics)
		}
		p := rg0.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			return false, kerr.ErrorForCode(p.ErrorCode).Error()
		}
		return p.Offset == offset, fmt.Sprintf("offset %d", p.Offset)
	})
}
