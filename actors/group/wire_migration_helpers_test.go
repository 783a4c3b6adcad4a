package group_test

import (
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Helpers of the online migration's wire tests: classic members of the consumer
// embedded protocol driven by hand, as a cooperative-sticky client behaves (it reports
// what it owns in its subscription, revokes what its SyncGroup no longer gives it).

const classicProto = "cooperative-sticky"

type cmember struct {
	w      *wire
	group  string
	id     string
	gen    int32
	own    map[string][]int32
	topics []string
	protos []string
	inst   string // group.instance.id; "" for a dynamic member
}

// subscription is a ConsumerProtocol subscription (v1: with the partitions owned).
func subscription(topics []string, own map[string][]int32) []byte {
	md := kmsg.NewConsumerMemberMetadata()
	md.Version = 1
	md.Topics = topics
	names := make([]string, 0, len(own))
	for t := range own {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		if len(own[t]) > 0 {
			md.OwnedPartitions = append(md.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: t, Partitions: own[t]})
		}
	}
	return md.AppendTo(nil)
}

func assignmentBytes(a map[string][]int32) []byte {
	asg := kmsg.NewConsumerMemberAssignment()
	asg.Version = 1
	names := make([]string, 0, len(a))
	for t := range a {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		asg.Topics = append(asg.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t, Partitions: a[t]})
	}
	return asg.AppendTo(nil)
}

func readAssignment(b []byte) map[string][]int32 {
	out := map[string][]int32{}
	if len(b) == 0 {
		return out
	}
	var asg kmsg.ConsumerMemberAssignment
	if err := asg.ReadFrom(b); err != nil {
		panic(err)
	}
	for _, t := range asg.Topics {
		if len(t.Partitions) > 0 {
			out[t.Topic] = append(out[t.Topic], t.Partitions...)
		}
	}
	return out
}

// joinReq is the member's JoinGroup (v5) with its subscription.
func (m *cmember) joinReq() *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version = 5
	r.Group, r.MemberID = m.group, m.id
	if m.inst != "" {
		r.InstanceID = kmsg.StringPtr(m.inst)
	}
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10000, 5000
	r.ProtocolType = "consumer"
	protos := m.protos
	if protos == nil {
		protos = []string{classicProto}
	}
	for _, p := range protos {
		jp := kmsg.NewJoinGroupRequestProtocol()
		jp.Name, jp.Metadata = p, subscription(m.topics, m.own)
		r.Protocols = append(r.Protocols, jp)
	}
	return r
}

func (m *cmember) syncReq(assign map[string][]byte) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Version = 5
	r.Group, r.MemberID, r.Generation = m.group, m.id, m.gen
	r.ProtocolType, r.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr(classicProto)
	for id, a := range assign {
		r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a})
	}
	return r
}

// classicGroup makes n classic members join g together and sync: the leader gives the
// partitions of topic t (parts of them) round-robin.
func (w *wire) classicGroup(g string, n int, parts int32, topics ...string) []*cmember {
	w.t.Helper()
	ms := make([]*cmember, n)
	chans := make([]<-chan kmsg.Response, n)
	for i := range ms {
		ms[i] = &cmember{w: w, group: g, own: map[string][]int32{}, topics: topics}
		first := w.do(ms[i].joinReq()).(*kmsg.JoinGroupResponse)
		wantCode(w.t, "first join", first.ErrorCode, kerr.MemberIDRequired.Code)
		ms[i].id = first.MemberID
		chans[i] = w.async(ms[i].joinReq())
	}
	var leader *cmember
	for i, ch := range chans {
		j := wait[*kmsg.JoinGroupResponse](w.t, ch, 10*time.Second)
		wantCode(w.t, "join", j.ErrorCode, 0)
		ms[i].gen = j.Generation
		if j.LeaderID == j.MemberID {
			leader = ms[i]
		}
	}
	plan := map[string]map[string][]int32{}
	for i, m := range ms {
		plan[m.id] = map[string][]int32{}
		for _, t := range topics {
			for p := int32(i); p < parts; p += int32(n) {
				plan[m.id][t] = append(plan[m.id][t], p)
			}
		}
	}
	assign := map[string][]byte{}
	for id, a := range plan {
		assign[id] = assignmentBytes(a)
	}
	syncs := map[*cmember]<-chan kmsg.Response{}
	for _, m := range ms {
		if m == leader {
			syncs[m] = w.async(m.syncReq(assign))
		} else {
			syncs[m] = w.async(m.syncReq(nil))
		}
	}
	for m, ch := range syncs {
		s := wait[*kmsg.SyncGroupResponse](w.t, ch, 10*time.Second)
		wantCode(w.t, "sync", s.ErrorCode, 0)
		m.own = readAssignment(s.MemberAssignment)
	}
	return ms
}

// hb is a Heartbeat at the member's generation.
func (m *cmember) hb() int16 {
	return m.w.do(hbReq(m.group, m.id, m.gen)).(*kmsg.HeartbeatResponse).ErrorCode
}

// rejoin is a JoinGroup then SyncGroup, keeping what the sync gives (the rest revoked);
// it returns the first error code.
func (m *cmember) rejoin() int16 {
	m.w.t.Helper()
	j := m.w.do(m.joinReq()).(*kmsg.JoinGroupResponse)
	if j.ErrorCode != 0 {
		return j.ErrorCode
	}
	if j.LeaderID != "" && j.LeaderID == j.MemberID {
		m.w.t.Fatalf("classic member %s was made leader of a consumer-protocol group", m.id)
	}
	m.gen = j.Generation
	s := m.w.do(m.syncReq(nil)).(*kmsg.SyncGroupResponse)
	if s.ErrorCode != 0 {
		return s.ErrorCode
	}
	m.own = readAssignment(s.MemberAssignment)
	return 0
}

// step is what a classic client does on its heartbeat tick: rejoin when told to.
func (m *cmember) step() {
	m.w.t.Helper()
	switch c := m.hb(); c {
	case 0:
	case kerr.RebalanceInProgress.Code:
		if c := m.rejoin(); c != 0 && c != kerr.RebalanceInProgress.Code {
			m.w.t.Fatalf("rejoin of %s: %s", m.id, codeName(c))
		}
	default:
		m.w.t.Fatalf("heartbeat of %s: %s", m.id, codeName(c))
	}
}

// noDoubleOwnerMixed fails if two members, classic or not, own one partition.
func noDoubleOwnerMixed(w *wire, cs []*cmember, ms []*member) {
	w.t.Helper()
	seen := map[string]string{}
	check := func(who string, own map[string][]int32) {
		for t, ps := range own {
			for _, p := range ps {
				k := t + "/" + strconv.Itoa(int(p))
				if o, dup := seen[k]; dup {
					w.t.Fatalf("partition %s owned by %s and %s", k, o, who)
				}
				seen[k] = who
			}
		}
	}
	for _, c := range cs {
		check(c.id, c.own)
	}
	for _, m := range ms {
		check(m.id, m.own)
	}
}

// ownedCount is how many partitions the members own together.
func ownedCount(cs []*cmember, ms []*member) int {
	n := 0
	for _, c := range cs {
		n += count(c.own)
	}
	for _, m := range ms {
		n += count(m.own)
	}
	return n
}
