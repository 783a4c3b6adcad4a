package group_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
)

// Wire-test helpers: a broker in-process and raw connections that send each request at
// the version the test pins.

type wire struct {
	t    *testing.T
	b    *broker.Broker
	cfg  config.Config // what b was started with (restart keeps its data dir)
	corr atomic.Int32
}

func startWire(t *testing.T, mutate func(*config.Config)) *wire {
	t.Helper()
	c := brokertest.Config(t)
	if mutate != nil {
		mutate(&c)
	}
	return &wire{t: t, b: brokertest.StartWith(t, c), cfg: c}
}

// ptProfile is the reference's profile P-T (§9), with the initial delay at 50 ms.
func ptProfile(c *config.Config) {
	c.GroupMinSessionTimeout = 10 * time.Millisecond
	c.GroupMaxSessionTimeout = 600000 * time.Millisecond
	c.GroupMaxSize = 4
	c.GroupInitialRebalanceDelay = 50 * time.Millisecond
}

// do sends req on a fresh connection and waits for its answer.
func (w *wire) do(req kmsg.Request) kmsg.Response {
	w.t.Helper()
	raw := brokertest.Dial(w.t, w.b.Addr())
	return raw.Roundtrip(req, w.corr.Add(1))
}

// async sends req on its own connection; the answer arrives on the channel.
func (w *wire) async(req kmsg.Request) <-chan kmsg.Response {
	w.t.Helper()
	raw := brokertest.Dial(w.t, w.b.Addr())
	corr := w.corr.Add(1)
	raw.Send(req, corr)
	ch := make(chan kmsg.Response, 1)
	go func() {
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		b, err := raw.ReadFrame(30 * time.Second)
		if err == nil {
			_, err = brokertest.Decode(b, resp)
		}
		if err != nil {
			close(ch)
			return
		}
		ch <- resp
	}()
	return ch
}

func wait[T kmsg.Response](t *testing.T, ch <-chan kmsg.Response, d time.Duration) T {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("connection failed before the response")
		}
		return r.(T)
	case <-time.After(d):
		t.Fatalf("no response within %v", d)
	}
	var zero T
	return zero
}

func codeName(c int16) string {
	if c == 0 {
		return "NONE"
	}
	return kerr.ErrorForCode(c).Error()
}

func wantCode(t *testing.T, what string, got, want int16) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: error %s, want %s", what, codeName(got), codeName(want))
	}
}

type joinOpts struct {
	version   int16
	member    string
	instance  string
	session   int32
	rebalance int32
	protocols []string
	ptype     string
	client    string
}

func joinReq(g string, o joinOpts) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version = o.version
	if r.Version == 0 && o.version == 0 {
		r.Version = 5
	}
	r.Group = g
	r.MemberID = o.member
	if o.instance != "" {
		r.InstanceID = &o.instance
	}
	r.SessionTimeoutMillis = o.session
	if r.SessionTimeoutMillis == 0 {
		r.SessionTimeoutMillis = 500
	}
	r.RebalanceTimeoutMillis = o.rebalance
	if r.RebalanceTimeoutMillis == 0 {
		r.RebalanceTimeoutMillis = 500
	}
	r.ProtocolType = o.ptype
	if r.ProtocolType == "" {
		r.ProtocolType = "consumer"
	}
	ps := o.protocols
	if ps == nil {
		ps = []string{"range"}
	}
	for _, p := range ps {
		jp := kmsg.NewJoinGroupRequestProtocol()
		jp.Name = p
		jp.Metadata = []byte{}
		r.Protocols = append(r.Protocols, jp)
	}
	return r
}

func syncReq(g, member string, gen int32, assign map[string][]byte) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Version = 3
	r.Group = g
	r.MemberID = member
	r.Generation = gen
	for m, a := range assign {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID = m
		ga.MemberAssignment = a
		r.GroupAssignment = append(r.GroupAssignment, ga)
	}
	return r
}

func hbReq(g, member string, gen int32) *kmsg.HeartbeatRequest {
	r := kmsg.NewPtrHeartbeatRequest()
	r.Version = 3
	r.Group = g
	r.MemberID = member
	r.Generation = gen
	return r
}

// dynJoin is the reference's dynJoin: JoinGroup v5 "" → MEMBER_ID_REQUIRED, then again
// with the id; the second join's channel is returned.
func (w *wire) dynJoin(g string, o joinOpts) (string, <-chan kmsg.Response) {
	w.t.Helper()
	o.version = 5
	first := w.do(joinReq(g, o)).(*kmsg.JoinGroupResponse)
	wantCode(w.t, "first join", first.ErrorCode, kerr.MemberIDRequired.Code)
	o.member = first.MemberID
	return first.MemberID, w.async(joinReq(g, o))
}

// stable1 is the reference's stable1: one dynamic member, joined and synced (generation 1).
func (w *wire) stable1(g string) string {
	w.t.Helper()
	m, ch := w.dynJoin(g, joinOpts{})
	j := wait[*kmsg.JoinGroupResponse](w.t, ch, 5*time.Second)
	wantCode(w.t, "join", j.ErrorCode, 0)
	s := w.do(syncReq(g, m, j.Generation, map[string][]byte{m: {}})).(*kmsg.SyncGroupResponse)
	wantCode(w.t, "sync", s.ErrorCode, 0)
	return m
}

func describe(w *wire, version int16, groups ...string) *kmsg.DescribeGroupsResponse {
	r := kmsg.NewPtrDescribeGroupsRequest()
	r.Version = version
	r.Groups = groups
	return w.do(r).(*kmsg.DescribeGroupsResponse)
}

func commitReq(g string, version int16, member string, gen int32, parts map[string][]int32) *kmsg.OffsetCommitRequest {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version = version
	r.Group = g
	r.MemberID = member
	r.Generation = gen
	r.RetentionTimeMillis = -1
	for topic, ps := range parts {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		for _, p := range ps {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition = p
			rp.Offset = int64(100 + p)
			rp.LeaderEpoch = 7
			md := "md"
			rp.Metadata = &md
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	}
	return r
}

func fetchReq(version int16, g string, parts map[string][]int32) *kmsg.OffsetFetchRequest {
	r := kmsg.NewPtrOffsetFetchRequest()
	r.Version = version
	r.Group = g
	if parts == nil {
		return r
	}
	r.Topics = []kmsg.OffsetFetchRequestTopic{}
	for topic, ps := range parts {
		r.Topics = append(r.Topics, kmsg.OffsetFetchRequestTopic{Topic: topic, Partitions: ps})
	}
	return r
}
