package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/auth"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/cluster"
	"kaas/config"
	"kaas/internal/testwait"
	"kaas/storage"
)

// gate wraps a broker's listeners: open passes connections on; stalled holds new ones
// unanswered (a paused process: the kernel still completes the handshake); dead closes
// them at once (a killed process). Connections already accepted are left alone.
type gate struct {
	mu   sync.Mutex
	mode string
	held []net.Conn
}

func (g *gate) set(mode string) { g.mu.Lock(); g.mode = mode; g.mu.Unlock() }

func (g *gate) wrap(_ string, ln net.Listener) net.Listener {
	return &gatedListener{Listener: ln, g: g}
}

type gatedListener struct {
	net.Listener
	g *gate
}

func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.g.mu.Lock()
		mode := l.g.mode
		if mode == "stalled" {
			l.g.held = append(l.g.held, c)
		}
		l.g.mu.Unlock()
		switch mode {
		case "stalled":
		case "dead":
			c.Close()
		default:
			return c, nil
		}
	}
}

func (l *gatedListener) Close() error {
	l.g.mu.Lock()
	for _, c := range l.g.held {
		c.Close()
	}
	l.g.held = nil
	l.g.mu.Unlock()
	return l.Listener.Close()
}

// clientVia is a kgo client whose every connection goes to addr, whatever broker it
// meant: kadm's CreateTopics, which kgo sends to the controller Metadata names, and its
// config changes land on addr's broker.
func clientVia(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	var d net.Dialer
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr),
		kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}),
		kgo.RequestRetries(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// settledWriter waits until every broker names the same catalogue writer, and returns
// its index.
func settledWriter(t *testing.T, bs []*broker.Broker) int {
	t.Helper()
	writer := -1
	testwait.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		writer = -1
		for i, b := range bs {
			if b.Env().Ownership().OwnsCatalogue() {
				writer = i
			}
		}
		if writer < 0 {
			return errors.New("no broker writes the catalogue yet")
		}
		for i, b := range bs {
			if id, st := b.Env().Ownership().Catalogue(); i != writer && (st != cluster.Elsewhere || int(id) != writer) {
				return fmt.Errorf("broker %d sees the catalogue at %d (%v), want %d", i, id, st, writer)
			}
		}
		return nil
	})
	return writer
}

func forwardedOK(b *broker.Broker, api string) float64 {
	n, err := testutil.GatherAndCount(b.Metrics().Registry, "kaas_inter_broker_requests_total")
	if err != nil || n == 0 {
		return 0
	}
	mfs, _ := b.Metrics().Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "kaas_inter_broker_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["api"] == api && labels["result"] == "ok" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// In a 3-broker cluster, kadm's CreateTopics, IncrementalAlterConfigs, AlterConfigs,
// CreatePartitions and DeleteTopics sent to a broker that does not write the catalogue
// succeed: it forwards them to the writer, and DescribeConfigs on every broker shows the
// change. With the writer unreachable — paused, then killed — the forwarding broker
// answers NOT_CONTROLLER within its inter-broker timeout, as before forwarding existed.
func TestClusterForwardsTopicChangesToTheWriter(t *testing.T) {
	cfgs := clusterConfigs(t, 3)
	gates := make([]*gate, 3)
	bs := make([]*broker.Broker, 3)
	for i := range cfgs {
		cfgs[i].InterBrokerRequestTimeout = time.Second
		gates[i] = &gate{}
		b, _, err := brokertest.StartLogged(t, cfgs[i], broker.WithListenerWrap(gates[i].wrap))
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	waitReady(t, bs...)
	w := settledWriter(t, bs)
	a, b := bs[(w+1)%3], bs[(w+2)%3]
	adm := kadm.NewClient(clientVia(t, a.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	everywhere := func(name, value string, isDefault bool) {
		t.Helper()
		for _, x := range bs {
			wantConfig(t, x.Addr(), "fwd", name, value, isDefault)
		}
	}

	cr, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"retention.ms": sp("3600000")}, "fwd")
	if err != nil || cr.Err != nil {
		t.Fatalf("CreateTopics through broker %d: %v %v", a.Env().NodeID, err, cr.Err)
	}
	everywhere("retention.ms", "3600000", false)

	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: sp("7200000")}}, "fwd")
	if err != nil || len(ar) != 1 || ar[0].Err != nil {
		t.Fatalf("IncrementalAlterConfigs through broker %d: %v %+v", a.Env().NodeID, err, ar)
	}
	everywhere("retention.ms", "7200000", false)

	// The legacy AlterConfigs replaces the whole set: retention.ms goes back to its default.
	ar, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: sp("5000")}}, "fwd")
	if err != nil || len(ar) != 1 || ar[0].Err != nil {
		t.Fatalf("AlterConfigs through broker %d: %v %+v", a.Env().NodeID, err, ar)
	}
	everywhere("max.message.bytes", "5000", false)
	if _, isDefault := topicConfig(t, bs[w].Addr(), "fwd", "retention.ms"); !isDefault {
		t.Fatal("AlterConfigs did not put retention.ms back to its default on the writer")
	}

	pr, err := adm.CreatePartitions(ctx, 2, "fwd")
	if err != nil || pr.Error() != nil {
		t.Fatalf("CreatePartitions through broker %d: %v %v", a.Env().NodeID, err, pr.Error())
	}
	td, err := kadm.NewClient(directClient(t, bs[w].Addr())).ListTopics(ctx, "fwd")
	if err != nil || len(td["fwd"].Partitions) != 5 {
		t.Fatalf("the writer lists fwd with %d partitions (%v), want 5", len(td["fwd"].Partitions), err)
	}
	for _, api := range []string{"CreateTopics", "IncrementalAlterConfigs", "AlterConfigs", "CreatePartitions"} {
		if n := forwardedOK(a, api); n < 1 {
			t.Errorf("broker %d forwarded no %s", a.Env().NodeID, api)
		}
	}
	dr, err := adm.DeleteTopics(ctx, "fwd")
	if err != nil || dr.Error() != nil {
		t.Fatalf("DeleteTopics through broker %d: %v %v", a.Env().NodeID, err, dr.Error())
	}

	// The writer unreachable. b has never spoken to it: its first connection meets the
	// gate. Paused: the forward times out (1 s) and b answers NOT_CONTROLLER.
	createTopic(t, bs[w].Addr(), "kept", 1)
	set := incResource(kmsg.ConfigResourceTypeTopic, "kept", incOp{"retention.ms", kmsg.IncrementalAlterConfigOpSet, sp("60000")})
	for _, mode := range []string{"stalled", "dead"} {
		gates[w].set(mode)
		start := time.Now()
		r := incAlter(t, b.Addr(), 1, false, set)
		wantCode(t, "writer "+mode, r[0].ErrorCode, r[0].ErrorMessage, kerr.NotController.Code, "")
		if took := time.Since(start); took > 8*time.Second {
			t.Fatalf("writer %s: NOT_CONTROLLER after %v", mode, took)
		}
	}
	gates[w].set("")
	if v, _ := topicConfig(t, bs[w].Addr(), "kept", "retention.ms"); v == "60000" {
		t.Fatal("a change answered NOT_CONTROLLER was applied")
	}
}

// With the authorizer, the forwarding broker decides for its client: a client without
// ALTER_CONFIGS on the topic is refused there (TOPIC_AUTHORIZATION_FAILED) and nothing
// reaches the writer; granted, the change is forwarded over the SASL inter-broker
// listener as the brokers' user, whom the writer lets pass by CLUSTER_ACTION.
func TestClusterForwardingAuthorizesTheClientFirst(t *testing.T) {
	cfgs := clusterConfigs(t, 3)
	dir := cfgs[0].DataDir
	passFile := filepath.Join(t.TempDir(), "broker.password")
	if err := os.WriteFile(passFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seedUser(t, dir, "broker", password)
	acls, err := auth.NewAuthorizer(auth.AuthorizerConfig{Dir: filepath.Join(dir, "__cluster"), FS: storage.OSFS{}, Log: brokertest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := acls.Create([]auth.ACL{
		{ResourceType: auth.Cluster, ResourceName: auth.ClusterName, PatternType: auth.Literal,
			Principal: "User:broker", Host: "*", Operation: auth.ClusterAction, Permission: auth.Allow},
		{ResourceType: auth.Topic, ResourceName: "*", PatternType: auth.Literal,
			Principal: "User:ANONYMOUS", Host: "*", Operation: auth.DescribeConfigs, Permission: auth.Allow},
	}); err != nil {
		t.Fatal(err)
	}
	bs := make([]*broker.Broker, 3)
	for i := range cfgs {
		port := cfgs[i].Listeners[0].Port
		cfgs[i].Listeners = []config.Listener{{Name: "SASL_PLAINTEXT", Host: "127.0.0.1", Port: port}, {Name: "PLAINTEXT", Host: "127.0.0.1"}}
		cfgs[i].Authorizer = "simple"
		cfgs[i].SecurityFilesPoll = 10 * time.Millisecond
		cfgs[i].InterBrokerSASLUsername = "broker"
		cfgs[i].InterBrokerSASLPasswordFile = passFile
		bs[i] = brokertest.StartWith(t, cfgs[i])
	}
	waitReady(t, bs...)
	w := settledWriter(t, bs)
	a := bs[(w+1)%3]
	// The topic, made at the writer by the brokers' user.
	brokerUser, err := kgo.NewClient(kgo.SeedBrokers(bs[w].ListenerAddr("SASL_PLAINTEXT")),
		kgo.SASL(scram.Auth{User: "broker", Pass: password}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer brokerUser.Close()
	ct := kmsg.NewPtrCreateTopicsRequest()
	tt := kmsg.NewCreateTopicsRequestTopic()
	tt.Topic, tt.NumPartitions, tt.ReplicationFactor = "guarded", 1, 1
	ct.Topics, ct.TimeoutMillis = append(ct.Topics, tt), 10_000
	if r, err := ct.RequestWith(context.Background(), brokerUser); err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create guarded as the brokers' user: %v %+v", err, r)
	}

	client := a.ListenerAddr("PLAINTEXT")
	set := incResource(kmsg.ConfigResourceTypeTopic, "guarded", incOp{"retention.ms", kmsg.IncrementalAlterConfigOpSet, sp("60000")})
	r := incAlter(t, client, 1, false, set)
	wantCode(t, "a client without ALTER_CONFIGS", r[0].ErrorCode, r[0].ErrorMessage, kerr.TopicAuthorizationFailed.Code, "")
	if n := forwardedOK(a, "IncrementalAlterConfigs"); n != 0 {
		t.Fatalf("a refused request was forwarded (%v)", n)
	}
	if v, _ := topicConfig(t, client, "guarded", "retention.ms"); v == "60000" {
		t.Fatal("a refused change was applied")
	}
	// Nor may the client create a topic through the forwarding broker.
	cr := request[*kmsg.CreateTopicsResponse](t, client, func() kmsg.Request {
		req := kmsg.NewPtrCreateTopicsRequest()
		tt := kmsg.NewCreateTopicsRequestTopic()
		tt.Topic, tt.NumPartitions, tt.ReplicationFactor = "sneaky", 1, 1
		req.Topics, req.TimeoutMillis = append(req.Topics, tt), 10_000
		return req
	}(), 7)
	if code := cr.Topics[0].ErrorCode; code != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("CreateTopics of a client without CREATE: code %d, want 29", code)
	}

	if err := acls.Create([]auth.ACL{{ResourceType: auth.Topic, ResourceName: "guarded", PatternType: auth.Literal,
		Principal: "User:ANONYMOUS", Host: "*", Operation: auth.AlterConfigs, Permission: auth.Allow}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		r := incAlter(t, client, 1, false, set)
		if r[0].ErrorCode == kerr.TopicAuthorizationFailed.Code {
			return errors.New("the grant is not in force yet")
		}
		wantCode(t, "granted", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		return nil
	})
	for _, x := range bs {
		wantConfig(t, x.ListenerAddr("PLAINTEXT"), "guarded", "retention.ms", "60000", false)
	}
	if n := forwardedOK(a, "IncrementalAlterConfigs"); n < 1 {
		t.Fatal("the granted change was not forwarded")
	}
}

// Over an SSL inter-broker listener: the forwarding broker verifies the writer's
// certificate against ssl.truststore.location and the change is applied.
func TestClusterForwardsOverTLS(t *testing.T) {
	pki := newPKI(t)
	cfgs := clusterConfigs(t, 2)
	bs := make([]*broker.Broker, 2)
	for i := range cfgs {
		cfgs[i].Listeners = []config.Listener{{Name: "SSL", Host: "127.0.0.1", Port: cfgs[i].Listeners[0].Port}, {Name: "PLAINTEXT", Host: "127.0.0.1"}}
		cfgs[i].SSLCertificateLocation, cfgs[i].SSLKeyLocation, cfgs[i].SSLTruststoreLocation = pki.certFile, pki.keyFile, pki.caFile
		bs[i] = brokertest.StartWith(t, cfgs[i])
	}
	waitReady(t, bs...)
	w := settledWriter(t, bs)
	a := bs[1-w]
	createTopic(t, bs[w].ListenerAddr("PLAINTEXT"), "sealed", 1)
	set := incResource(kmsg.ConfigResourceTypeTopic, "sealed", incOp{"retention.ms", kmsg.IncrementalAlterConfigOpSet, sp("60000")})
	r := incAlter(t, a.ListenerAddr("PLAINTEXT"), 1, false, set)
	wantCode(t, "forwarded over TLS", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	wantConfig(t, bs[w].ListenerAddr("PLAINTEXT"), "sealed", "retention.ms", "60000", false)
	if n := forwardedOK(a, "IncrementalAlterConfigs"); n != 1 {
		t.Fatalf("forwarded %v, want 1", n)
	}
}
