package group_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/config"
	"kaas/internal/testwait"
)

// Helpers of the consumer group protocol's wire tests (KIP-848).

// consumerProfile: sessions and heartbeats short enough for tests (the bounds lowered).
func consumerProfile(c *config.Config) {
	c.GroupConsumerMinSessionTimeout = 50 * time.Millisecond
	c.GroupConsumerSessionTimeout = 10 * time.Second
	c.GroupConsumerMinHeartbeatInterval = 10 * time.Millisecond
	c.GroupConsumerHeartbeatInterval = 100 * time.Millisecond
}

// hbOpts is one ConsumerGroupHeartbeat; nil slices are sent as null.
type hbOpts struct {
	version   int16 // 0 means 1
	member    string
	epoch     int32
	instance  *string
	rack      *string
	rebalance int32 // 0 means 60000 for a join, -1 otherwise
	topics    []string
	regex     *string
	assignor  *string
	owned     []kmsg.ConsumerGroupHeartbeatRequestTopic
	ownedSet  bool // send owned even when nil ([] then)
}

func cghReq(g string, o hbOpts) *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version = o.version
	if r.Version == 0 {
		r.Version = 1
	}
	if o.version < 0 {
		r.Version = 0
	}
	r.Group, r.MemberID, r.MemberEpoch = g, o.member, o.epoch
	r.InstanceID, r.RackID, r.SubscribedTopicRegex, r.ServerAssignor = o.instance, o.rack, o.regex, o.assignor
	r.RebalanceTimeoutMillis = o.rebalance
	if o.rebalance == 0 {
		r.RebalanceTimeoutMillis = -1
		if o.epoch == 0 {
			r.RebalanceTimeoutMillis = 60000
		}
	}
	r.SubscribedTopicNames = o.topics
	r.Topics = o.owned
	if r.Topics == nil && (o.ownedSet || o.epoch == 0) {
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	return r
}

func (w *wire) cgh(g string, o hbOpts) *kmsg.ConsumerGroupHeartbeatResponse {
	w.t.Helper()
	return w.do(cghReq(g, o)).(*kmsg.ConsumerGroupHeartbeatResponse)
}

func strp(s string) *string { return &s }

func newMemberID() string { return uuid.NewString() }

// topicIDs maps the wire's topic names to ids and back.
func (w *wire) topicIDs() (map[string][16]byte, map[[16]byte]string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := w.admin().ListTopics(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	ids, names := map[string][16]byte{}, map[[16]byte]string{}
	for _, t := range td.Sorted() {
		ids[t.Topic], names[t.ID] = t.ID, t.Topic
	}
	return ids, names
}

// owned is an assignment (topic → partitions) as a heartbeat reports it.
func (w *wire) owned(a map[string][]int32) []kmsg.ConsumerGroupHeartbeatRequestTopic {
	ids, _ := w.topicIDs()
	out := []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	for t, ps := range a {
		if len(ps) == 0 {
			continue
		}
		out = append(out, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: ids[t], Partitions: ps})
	}
	return out
}

// assigned reads a heartbeat response's assignment as topic → partitions (nil: none sent).
func (w *wire) assigned(r *kmsg.ConsumerGroupHeartbeatResponse) map[string][]int32 {
	if r.Assignment == nil {
		return nil
	}
	_, names := w.topicIDs()
	out := map[string][]int32{}
	for _, t := range r.Assignment.Topics {
		out[names[t.TopicID]] = append(out[names[t.TopicID]], t.Partitions...)
	}
	return out
}

func count(a map[string][]int32) int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

func (w *wire) cgDescribe(version int16, groups ...string) *kmsg.ConsumerGroupDescribeResponse {
	w.t.Helper()
	r := kmsg.NewPtrConsumerGroupDescribeRequest()
	r.Version = version
	r.Groups = groups
	return w.do(r).(*kmsg.ConsumerGroupDescribeResponse)
}

// member is a raw-wire consumer-protocol member: it heartbeats by hand and applies what
// it is told, as a client does (revoking first).
type member struct {
	w     *wire
	group string
	id    string
	epoch int32
	own   map[string][]int32
	inst  *string
}

func (w *wire) join(g string, topics ...string) *member {
	w.t.Helper()
	m := &member{w: w, group: g, id: newMemberID(), own: map[string][]int32{}}
	r := w.cgh(g, hbOpts{member: m.id, topics: topics})
	wantCode(w.t, "join", r.ErrorCode, 0)
	m.apply(r)
	return m
}

// apply takes the response's epoch and assignment (a client revokes at once).
func (m *member) apply(r *kmsg.ConsumerGroupHeartbeatResponse) {
	m.w.t.Helper()
	if r.ErrorCode != 0 {
		m.w.t.Fatalf("heartbeat of %s: %s", m.id, codeName(r.ErrorCode))
	}
	m.epoch = r.MemberEpoch
	if a := m.w.assigned(r); a != nil {
		m.own = a
	}
}

// beat is one keepalive-or-full heartbeat reporting what the member owns.
func (m *member) beat() *kmsg.ConsumerGroupHeartbeatResponse {
	m.w.t.Helper()
	r := m.w.cgh(m.group, hbOpts{member: m.id, epoch: m.epoch, owned: m.w.owned(m.own), ownedSet: true, instance: m.inst})
	m.apply(r)
	return r
}

// settle heartbeats every member until the group is Stable and every member is at the
// group's assignment epoch with its target.
func (w *wire) settle(g string, ms ...*member) *kmsg.ConsumerGroupDescribeResponseGroup {
	w.t.Helper()
	var d kmsg.ConsumerGroupDescribeResponseGroup
	testwait.For(w.t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, m := range ms {
			m.beat()
		}
		d = w.cgDescribe(1, g).Groups[0]
		if d.State != "Stable" {
			return fmt.Errorf("group %s", d.State)
		}
		for _, m := range ms {
			if m.epoch != d.AssignmentEpoch {
				return fmt.Errorf("member %s at %d, target %d", m.id, m.epoch, d.AssignmentEpoch)
			}
		}
		return nil
	})
	return &d
}

// noDoubleOwner fails if two members own one partition.
func noDoubleOwner(t *testing.T, ms ...*member) {
	t.Helper()
	seen := map[string]string{}
	for _, m := range ms {
		for tp, ps := range m.own {
			for _, p := range ps {
				k := tp + "/" + strconv.Itoa(int(p))
				if o, dup := seen[k]; dup {
					t.Fatalf("partition %s owned by %s and %s", k, o, m.id)
				}
				seen[k] = m.id
			}
		}
	}
}

func errorOf(format string, args ...any) error { return fmt.Errorf(format, args...) }
