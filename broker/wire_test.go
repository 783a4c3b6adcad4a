package broker_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

func apiVersions(v int16) *kmsg.ApiVersionsRequest {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(v)
	req.ClientSoftwareName = "kaas-test"
	req.ClientSoftwareVersion = "1.0"
	return req
}

func metadata(v int16, topics ...string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(v)
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	return req
}

// servedOK checks that a fresh client is still served after something went wrong.
func servedOK(t *testing.T, addr string) {
	t.Helper()
	c := brokertest.Dial(t, addr)
	resp := c.Roundtrip(apiVersions(3), 7).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("fresh client not served: error %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
	}
}

func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	b := brokertest.Start(t, nil)
	c := brokertest.Dial(t, b.Addr())
	var batch []byte
	for i := 0; i < 100; i++ {
		var req kmsg.Request = apiVersions(int16(i % 5))
		if i%3 == 0 {
			req = metadata(int16(i%13), "t")
		}
		batch = append(batch, c.Encode(req, int32(1000+i))...)
	}
	c.Write(batch) // all 100 in one write: the broker must pipeline them
	for i := 0; i < 100; i++ {
		var resp kmsg.Response
		if i%3 == 0 {
			resp = kmsg.NewPtrMetadataResponse()
			resp.SetVersion(int16(i % 13))
		} else {
			resp = kmsg.NewPtrApiVersionsResponse()
			resp.SetVersion(int16(i % 5))
		}
		if corr := c.Recv(resp); corr != int32(1000+i) {
			t.Fatalf("response %d has correlation id %d, want %d", i, corr, 1000+i)
		}
	}
}

func TestStalledClientDoesNotDelayOthers(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.MaxInflightPerConn = 4 })
	stalled := brokertest.Dial(t, b.Addr())
	// Far more requests than the in-flight bound, never reading a response: the broker
	// must stop reading this socket, not drop requests, and keep serving others.
	var batch []byte
	for i := 0; i < 2000; i++ {
		batch = append(batch, stalled.Encode(metadata(12), int32(i))...)
	}
	go func() { _, _ = stalled.C.Write(batch) }()
	for i := 0; i < 20; i++ {
		servedOK(t, b.Addr())
	}
	// The stalled client then reads: every response arrives, in order.
	for i := 0; i < 2000; i++ {
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(12)
		if corr := stalled.Recv(resp); corr != int32(i) {
			t.Fatalf("stalled client response %d has correlation %d", i, corr)
		}
	}
}

func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.MaxRequestBytes = 1 << 20 })
	bystander := brokertest.Dial(t, b.Addr())
	bystander.Roundtrip(apiVersions(0), 1)

	frame := func(body []byte) []byte {
		out := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		return append(out, body...)
	}
	header := func(key, version int16) []byte {
		h := binary.BigEndian.AppendUint16(nil, uint16(key))
		h = binary.BigEndian.AppendUint16(h, uint16(version))
		h = binary.BigEndian.AppendUint32(h, 9)
		return binary.BigEndian.AppendUint16(h, 0xffff) // null client id
	}
	cases := map[string][]byte{
		"frame over the limit": binary.BigEndian.AppendUint32(nil, 1<<20+1),
		"negative frame size":  binary.BigEndian.AppendUint32(nil, 0x80000000),
		"unknown api key":      frame(header(9999, 0)),
		"unadvertised version": frame(header(3, 99)),
		"truncated header":     frame([]byte{0, 3, 0}),
		"undecodable body":     frame(append(header(3, 1), 0x7f, 0xff, 0xff, 0xff)),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			c := brokertest.Dial(t, b.Addr())
			c.Write(raw)
			if !c.Closed(5 * time.Second) {
				t.Fatalf("connection not closed after %s", name)
			}
			servedOK(t, b.Addr())
		})
	}
	// The bystander connection opened before all this is still served.
	resp := bystander.Roundtrip(apiVersions(0), 2).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("bystander got error %d", resp.ErrorCode)
	}
}

func TestApiVersionsUnsupportedVersionAnswersWithTable(t *testing.T) {
	b := brokertest.Start(t, nil)
	c := brokertest.Dial(t, b.Addr())
	req := apiVersions(4)
	raw := c.Encode(req, 5)
	binary.BigEndian.PutUint16(raw[6:], 77) // version 77, header still v2
	c.Write(raw)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	if corr := c.Recv(resp); corr != 5 {
		t.Fatalf("correlation %d", corr)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("error %d, want UNSUPPORTED_VERSION", resp.ErrorCode)
	}
	var found bool
	for _, k := range resp.ApiKeys {
		if k.ApiKey == 18 && k.MinVersion == 0 && k.MaxVersion == 4 {
			found = true
		}
	}
	if !found {
		t.Fatalf("table lacks ApiVersions 0-4: %+v", resp.ApiKeys)
	}
	// The connection stays open: the client retries at a version both speak.
	if r := c.Roundtrip(apiVersions(3), 6).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatalf("retry got %d", r.ErrorCode)
	}
}

func TestApiVersionsInvalidClientSoftware(t *testing.T) {
	b := brokertest.Start(t, nil)
	c := brokertest.Dial(t, b.Addr())
	for _, name := range []string{"", "-bad", "bad name", "ok."} {
		req := apiVersions(3)
		req.ClientSoftwareName = name
		resp := c.Roundtrip(req, 1).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != kerr.InvalidRequest.Code {
			t.Fatalf("software name %q: error %d, want INVALID_REQUEST", name, resp.ErrorCode)
		}
	}
	resp := c.Roundtrip(apiVersions(3), 2).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("valid name: error %d", resp.ErrorCode)
	}
}

func TestApiVersionsAndMetadataThroughKgoAndKadm(t *testing.T) {
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Err != nil {
			t.Fatalf("broker %d: %v", v.NodeID, v.Err)
		}
		if max, ok := v.KeyMaxVersion(3); !ok || max != 12 {
			t.Fatalf("Metadata max version %d (%v), want 12", max, ok)
		}
	}
	md, err := adm.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if md.Cluster != b.ClusterID() || md.Controller != 0 || len(md.Brokers) != 1 {
		t.Fatalf("metadata: cluster %q controller %d brokers %v", md.Cluster, md.Controller, md.Brokers)
	}
	if got := md.Brokers[0]; got.NodeID != 0 || got.Host+":"+itoa(got.Port) != b.Addr() {
		t.Fatalf("broker %+v, want node 0 at %s", got, b.Addr())
	}
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }

func TestMetadataUsesTheRequestsListener(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) {
		c.Listeners = []config.Listener{
			{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 0},
			{Name: "INTERNAL", Host: "127.0.0.1", Port: 0},
		}
		c.AdvertisedListeners = []config.Listener{{Name: "INTERNAL", Host: "kaas-0.internal", Port: 19093}}
		c.SecurityProtocolMap["INTERNAL"] = "PLAINTEXT"
	})
	c := brokertest.Dial(t, b.ListenerAddr("INTERNAL"))
	resp := c.Roundtrip(metadata(12), 1).(*kmsg.MetadataResponse)
	if len(resp.Brokers) != 1 || resp.Brokers[0].Host != "kaas-0.internal" || resp.Brokers[0].Port != 19093 {
		t.Fatalf("brokers on INTERNAL: %+v", resp.Brokers)
	}
	c2 := brokertest.Dial(t, b.ListenerAddr("PLAINTEXT"))
	resp = c2.Roundtrip(metadata(0), 1).(*kmsg.MetadataResponse)
	if len(resp.Brokers) != 1 || resp.Brokers[0].Host+":"+itoa(resp.Brokers[0].Port) != b.ListenerAddr("PLAINTEXT") {
		t.Fatalf("brokers on PLAINTEXT: %+v", resp.Brokers)
	}
}

func TestClusterIDSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b := brokertest.Start(t, func(c *config.Config) { c.DataDir = dir })
	id := b.ClusterID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b2 := brokertest.Start(t, func(c *config.Config) { c.DataDir = dir })
	if b2.ClusterID() != id || len(id) != 22 {
		t.Fatalf("cluster id %q after restart, was %q", b2.ClusterID(), id)
	}
}

func TestHTTPHealthReadyMetrics(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.HTTPListen = "127.0.0.1:0" })
	servedOK(t, b.Addr())
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + b.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("readyz %d %s", code, body)
	}
	code, body := get("/metrics")
	if code != 200 {
		t.Fatalf("metrics %d", code)
	}
	for _, want := range []string{
		"kaas_connections_open",
		`kaas_requests_total{api="ApiVersions",error="0",version="3"}`,
		`kaas_request_duration_seconds_bucket{api="ApiVersions"`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
}

func TestGracefulStopAnswersWhatWasRead(t *testing.T) {
	b := brokertest.Start(t, nil)
	c := brokertest.Dial(t, b.Addr())
	var batch []byte
	for i := 0; i < 200; i++ {
		batch = append(batch, c.Encode(metadata(12), int32(i))...)
	}
	c.Write(batch)
	// Wait for the first answer so the broker has surely read part of the batch.
	first := kmsg.NewPtrMetadataResponse()
	first.SetVersion(12)
	if corr := c.Recv(first); corr != 0 {
		t.Fatalf("first correlation %d", corr)
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- b.Stop(ctx)
	}()
	// Whatever follows is an unbroken, in-order run of answers, then a clean close.
	next := int32(1)
	for {
		frame, err := c.ReadFrame(10 * time.Second)
		if err != nil {
			break
		}
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(12)
		corr, err := brokertest.Decode(frame, resp)
		if err != nil || corr != next {
			t.Fatalf("after stop: correlation %d (err %v), want %d", corr, err, next)
		}
		next++
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not finish")
	}
	// New connections are refused once stopped.
	if c2, err := net.DialTimeout("tcp", b.Addr(), time.Second); err == nil {
		c2.Close()
		t.Fatal("listener still accepting after stop")
	}
}

// connections.max.idle.ms reaches the broker's connections: one left idle is closed
// (waited for as its close, not timed), and the broker serves new ones. That requests
// keep a connection open, and the timeout's exact length, are
// TestIdleTimeoutOnTheFakeClock's (actors/conn), on synctest's clock: here a loaded
// machine could stretch a gap between requests past the timeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	const idleFor = time.Second
	b := brokertest.Start(t, func(c *config.Config) { c.ConnectionsMaxIdle = idleFor })
	idle := brokertest.Dial(t, b.Addr())
	idle.Roundtrip(apiVersions(3), 1)
	if !idle.Closed(10 * time.Second) {
		t.Fatal("idle connection still open")
	}
	servedOK(t, b.Addr())
}

// TestEveryAdvertisedVersionIsServed sends a default request of every API at every version
// ApiVersions advertises: each must be answered on the same connection (with whatever
// error code fits an empty request), never refused with a closed connection.
func TestEveryAdvertisedVersionIsServed(t *testing.T) {
	b := brokertest.Start(t, nil)
	c := brokertest.Dial(t, b.Addr())
	table := c.Roundtrip(apiVersions(3), 1).(*kmsg.ApiVersionsResponse)
	corr := int32(2)
	served := 0
	for _, k := range table.ApiKeys {
		for v := k.MinVersion; v <= k.MaxVersion; v++ {
			req := kmsg.RequestForKey(k.ApiKey)
			if req == nil {
				t.Fatalf("advertised key %d has no request type", k.ApiKey)
			}
			req.SetVersion(v)
			switch r := req.(type) {
			case *kmsg.ProduceRequest:
				r.Acks = 1 // acks=0 has no response to wait for
			case *kmsg.FetchRequest:
				r.MaxWaitMillis = 0
			case *kmsg.ApiVersionsRequest:
				r.ClientSoftwareName, r.ClientSoftwareVersion = "kaas-test", "1"
			}
			c.Send(req, corr)
			resp := req.ResponseKind()
			resp.SetVersion(v)
			if got := c.Recv(resp); got != corr {
				t.Fatalf("%s v%d: correlation %d, want %d", kmsg.NameForKey(k.ApiKey), v, got, corr)
			}
			corr++
			served++
		}
	}
	if served < 100 {
		t.Fatalf("only %d API versions advertised", served)
	}
}
