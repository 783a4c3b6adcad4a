package deploytest

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	kproc "kaas/e2e/proc"
	kubefence "kaas/fence/kube"
	"kaas/registry"
)

// brokerSet runs the installed release's brokers as kaas processes on loopback, one for
// each pod kwok plays: each with the arguments of the StatefulSet's container as the
// kubelet would expand them for its pod, except what binds the pod's network and disk
// (listeners, advertised listeners, the HTTP port, the data dir), and with the token of
// the chart's ServiceAccount, so the broker runs under the chart's RBAC. The registry's
// address mapper (--registry.peers) sends each ordinal to its loopback port; no address
// read from a slice is dialled.
type brokerSet struct {
	t     *testing.T
	cs    kubernetes.Interface
	bin   string
	data  string
	kc    string // the ServiceAccount's kubeconfig
	ports []int
	procs []*kproc.Broker
}

func newBrokerSet(t *testing.T, ctx context.Context, cp *controlPlane, cs kubernetes.Interface, max int) *brokerSet {
	t.Helper()
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "kaas", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for the chart's ServiceAccount: %v", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kaas-test"] = &clientcmdapi.Cluster{Server: cp.config.Host, CertificateAuthority: cp.config.CAFile}
	kc.AuthInfos["kaas"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["kaas-test"] = &clientcmdapi.Context{Cluster: "kaas-test", AuthInfo: "kaas", Namespace: namespace}
	kc.CurrentContext = "kaas-test"
	dir := t.TempDir()
	b := &brokerSet{t: t, cs: cs, bin: kproc.Build(t), data: filepath.Join(dir, "data"), kc: filepath.Join(dir, "sa-kubeconfig")}
	if err := clientcmd.WriteToFile(*kc, b.kc); err != nil {
		t.Fatal(err)
	}
	for range max {
		b.ports = append(b.ports, kproc.FreePort(t))
	}
	b.procs = make([]*kproc.Broker, max)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the brokers' log: %s", filepath.Join(dir, "broker.log"))
		}
	})
	return b
}

// args are the kaas container's arguments of the StatefulSet as installed now, expanded
// for pod ordinal i, the pod-bound ones left out, the loopback wiring added.
func (b *brokerSet) args(ctx context.Context, i int) []string {
	b.t.Helper()
	sts, err := b.cs.AppsV1().StatefulSets(namespace).Get(ctx, "kaas", metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			continue
		}
		switch e.ValueFrom.FieldRef.FieldPath {
		case "metadata.labels['apps.kubernetes.io/pod-index']": // the node id's source
			env[e.Name] = strconv.Itoa(i)
		case "metadata.name":
			env[e.Name] = fmt.Sprintf("kaas-%d", i)
		case "metadata.namespace":
			env[e.Name] = namespace
		}
	}
	size := int(*sts.Spec.Replicas)
	var out []string
	for _, a := range c.Args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch name {
		case "listeners", "advertised.listeners", "http.listen", "data.dir":
			continue // bound to the pod's network and volume
		case "log.format", "log.level":
			continue // kproc's json at info, to read the log
		}
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if strings.Contains(a, "$(") {
			b.t.Fatalf("argument %q names a variable the pod's env does not set", a)
		}
		out = append(out, a)
	}
	var peers []string
	for id := 0; id < size; id++ {
		peers = append(peers, fmt.Sprintf("%d@127.0.0.1:%d", id, b.ports[id]))
	}
	return append(out, "--registry.kubeconfig="+b.kc, "--registry.peers="+strings.Join(peers, ","),
		"--group.initial.rebalance.delay.ms=0")
}

// start runs broker i with the StatefulSet's arguments as installed now.
func (b *brokerSet) start(ctx context.Context, i int) {
	b.t.Helper()
	b.procs[i] = kproc.Start(b.t, b.bin, b.data, b.ports[i], b.args(ctx, i)...)
}

// stop stops broker i gracefully, as the kubelet does a pod of a rolling update.
func (b *brokerSet) stop(i int) {
	b.t.Helper()
	if code, err := b.procs[i].Term(30 * time.Second); err != nil || code != 0 {
		b.t.Fatalf("broker %d: graceful stop: exit %d, %v", i, code, err)
	}
}

func (b *brokerSet) admin(n int) *kadm.Client {
	b.t.Helper()
	var seeds []string
	for _, p := range b.ports[:n] {
		seeds = append(seeds, "127.0.0.1:"+strconv.Itoa(p))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// leasesHeld waits for the Leases of brokers 0..n-1, each held.
func (b *brokerSet) leasesHeld(ctx context.Context, n int) {
	b.t.Helper()
	eventually(b.t, 60*time.Second, fmt.Sprintf("the Leases of %d brokers held", n), func() (bool, string) {
		var why []string
		for id := int32(0); int(id) < n; id++ {
			l, err := b.cs.CoordinationV1().Leases(namespace).Get(ctx, kubefence.LeaseName("kaas-headless", id), metav1.GetOptions{})
			switch {
			case err != nil:
				why = append(why, err.Error())
			case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "":
				why = append(why, l.Name+" not held")
			}
		}
		return len(why) == 0, strings.Join(why, "; ")
	})
}

// coordinators waits until every group is coordinated by the broker the hash over the
// view gives it, as FindCoordinator answers.
func (b *brokerSet) coordinators(ctx context.Context, adm *kadm.Client, v registry.View, groups []string) {
	b.t.Helper()
	eventually(b.t, 90*time.Second, fmt.Sprintf("groups coordinated by the hash over %d brokers", v.Size), func() (bool, string) {
		resp := adm.FindGroupCoordinators(ctx, groups...)
		for _, g := range groups {
			want, _ := v.GroupOwner(g)
			r, ok := resp[g]
			if !ok || r.Err != nil || r.NodeID != want {
				return false, fmt.Sprintf("group %s: coordinator %d (%v), want %d", g, r.NodeID, r.Err, want)
			}
		}
		return true, ""
	})
}

// offsetsKept waits until each group's committed offset of partition 0 reads back as
// want gives it.
func (b *brokerSet) offsetsKept(ctx context.Context, adm *kadm.Client, topic string, groups []string, want func(i int) int64, when string) {
	b.t.Helper()
	for i, g := range groups {
		eventually(b.t, 60*time.Second, fmt.Sprintf("%s: group %s's offset", when, g), func() (bool, string) {
			os, err := adm.FetchOffsets(ctx, g)
			if err != nil {
				return false, err.Error()
			}
			o, ok := os.Lookup(topic, 0)
			if !ok || o.Err != nil || o.At != want(i) {
				return false, fmt.Sprintf("offset %v (%v), want %d", o.At, o.Err, want(i))
			}
			return true, ""
		})
	}
}

// commitAll commits offset at(i) of topic's partition 0 for each group.
func commitAll(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, groups []string, at func(i int) int64) {
	t.Helper()
	for i, g := range groups {
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: topic, Partition: 0, At: at(i), LeaderEpoch: -1})
		eventually(t, 30*time.Second, "commit of "+g, func() (bool, string) {
			r, err := adm.CommitOffsets(ctx, g, os)
			if err == nil {
				err = r.Error()
			}
			return err == nil, fmt.Sprint(err)
		})
	}
}

// commitOn sends an OffsetCommit of group's partition 0 to broker i itself (no routing)
// and returns its error code.
func (b *brokerSet) commitOn(ctx context.Context, i int, group, topic string, offset int64) int16 {
	b.t.Helper()
	// The raw OffsetCommit below names its topic, as v9 does (v10 names it by id).
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(8, 9)
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:"+strconv.Itoa(b.ports[i])), kgo.MaxVersions(versions))
	if err != nil {
		b.t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 0, offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	r, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		b.t.Fatalf("OffsetCommit to broker %d: %v", i, err)
	}
	return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// runBrokersOnRelease: the three brokers of the release discover each other from the
// slices the EndpointSlice controller published for the chart's headless Service, take
// their Leases under the chart's RBAC, and coordinate groups by the hash over three;
// `helm upgrade` to four replicas, rolled as the StatefulSet controller rolls pods (the
// new ordinal first, then from the highest down), moves groups to the new broker with
// their committed offsets; `helm rollback` to three, rolled with broker 3 still stopping
// while broker 2 restarts on the smaller size, hands broker 3's groups back with every
// commit it acknowledged, and no group is served by two brokers meanwhile.
func runBrokersOnRelease(t *testing.T, ctx context.Context, cp *controlPlane, cs kubernetes.Interface, upgrade, rollback func()) {
	b := newBrokerSet(t, ctx, cp, cs, 4)
	for i := 0; i < 3; i++ {
		b.start(ctx, i)
	}
	b.leasesHeld(ctx, 3)
	adm := b.admin(3)
	const topic = "orders"
	eventually(t, 60*time.Second, "topic created", func() (bool, string) {
		r, err := adm.CreateTopic(ctx, 1, -1, nil, topic)
		if err == nil && (r.Err == nil || strings.Contains(r.Err.Error(), "TOPIC_ALREADY_EXISTS")) {
			return true, ""
		}
		return false, fmt.Sprint(err, r.Err)
	})
	three := registry.View{Size: 3, Alive: []int32{0, 1, 2}}
	four := registry.View{Size: 4, Alive: []int32{0, 1, 2, 3}}
	var groups []string
	moved := 0
	back, stays := "", "" // from broker 3 to broker 2 on the shrink; on broker 2 throughout
	for i := 0; len(groups) < 12 || back == "" || stays == ""; i++ {
		g := fmt.Sprintf("group-%d", i)
		o3, _ := three.GroupOwner(g)
		o4, _ := four.GroupOwner(g)
		switch {
		case o4 == 3 && o3 == 2 && back == "":
			back = g
		case o4 == 2 && o3 == 2 && stays == "":
			stays = g
		case o4 == 3 && moved < 4 || o4 == o3 && len(groups)-moved < 8:
			if len(groups) < 12 {
				groups = append(groups, g)
				moved += b2i(o4 == 3)
			}
		}
	}
	groups = append(groups, back, stays)
	b.coordinators(ctx, adm, three, groups)
	t.Logf("three brokers hold their Leases and coordinate %d groups by the hash over three; %d of them go to broker 3 over four", len(groups), moved)
	first := func(i int) int64 { return int64(100 + i) }
	commitAll(t, ctx, adm, topic, groups, first)
	b.offsetsKept(ctx, adm, topic, groups, first, "on three brokers")

	upgrade()
	b.start(ctx, 3)
	for i := 2; i >= 0; i-- {
		b.stop(i)
		b.start(ctx, i)
	}
	b.leasesHeld(ctx, 4)
	adm4 := b.admin(4)
	b.coordinators(ctx, adm4, four, groups)
	b.offsetsKept(ctx, adm4, topic, groups, first, "after the upgrade to four brokers")
	t.Logf("after the roll to four brokers every group is coordinated by the hash over four, with its committed offset")
	second := func(i int) int64 { return int64(200 + i) }
	commitAll(t, ctx, adm4, topic, groups, second)

	eventually(t, 30*time.Second, "commit of "+back+" on broker 3", func() (bool, string) {
		code := b.commitOn(ctx, 3, back, topic, 300)
		return code == 0, fmt.Sprintf("code %d", code)
	})
	backAt := int64(300)

	// Back to three. The StatefulSet controller stops pod 3 and rolls 2, 1, 0; here broker
	// 2 restarts on the smaller size while broker 3's process, on the larger one, still
	// runs (its pod's endpoint may already be gone, and it lets its groups go then).
	rollback()
	b.stop(2)
	b.start(ctx, 2)
	eventually(t, 60*time.Second, "broker 2 on three brokers serving "+stays, func() (bool, string) {
		code := b.commitOn(ctx, 2, stays, topic, 200+int64(len(groups)-1))
		return code == 0, fmt.Sprintf("code %d", code)
	})
	// Never both: a group broker 3 still serves waits on broker 2, and once broker 2
	// serves it broker 3 does not.
	code2 := b.commitOn(ctx, 2, back, topic, 301)
	code3 := b.commitOn(ctx, 3, back, topic, 302)
	switch {
	case code2 == 0 && code3 == 0:
		t.Fatalf("group %s served by broker 2 (on three) and broker 3 (on four) at once", back)
	case code2 == 0:
		backAt = 301
	case code3 == 0:
		backAt = 302
	}
	t.Logf("while broker 3 stops: %s answers %d on broker 2, %d on broker 3", back, code2, code3)
	b.stop(3)
	for i := 1; i >= 0; i-- {
		b.stop(i)
		b.start(ctx, i)
	}
	b.leasesHeld(ctx, 3)
	adm3 := b.admin(3)
	b.coordinators(ctx, adm3, three, groups)
	b.offsetsKept(ctx, adm3, topic, groups, func(i int) int64 {
		if groups[i] == back {
			return backAt // acknowledged by broker 2 or 3 as broker 3 was scaled away
		}
		return second(i)
	}, "after the rollback to three brokers")
	t.Logf("after the roll back to three brokers every group is coordinated by the hash over three, with its committed offset")
	for i := 2; i >= 0; i-- {
		b.stop(i)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ptr[T any](v T) *T { return &v }
