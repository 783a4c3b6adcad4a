package chaos

import (
	"bytes"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/conn"
)

// Recorder keeps, from the connections' frame boundary, what the broker told its
// clients: every request until it is answered or its connection closes (invariant 3),
// every acknowledged OffsetCommit (1), every SyncGroup a leader sent and every
// assignment a member was handed (2), and the retriable errors injected (5).
type Recorder struct {
	mu         sync.Mutex
	live       map[string]map[int32]*req // by connection, by correlation id
	requests   int
	violations []string

	commits  map[Partition][]int64 // acknowledged offsets, in acknowledgement order
	leader   map[genKey]map[string][]byte
	got      map[genKey]map[string][]byte
	injected map[[2]int16]int // by API key and code
	// fences are the ConsumerGroupHeartbeats answered FENCED_MEMBER_EPOCH or
	// UNKNOWN_MEMBER_ID (7), by group, each as "member code at epoch".
	fences map[string][]string
}

// Partition is one group's committed partition.
type Partition struct {
	Group, Topic string
	Partition    int32
}

type genKey struct {
	group string
	gen   int32
}

type req struct {
	key   int16
	ver   int16
	start time.Time
	limit time.Duration
}

// NewRecorder makes an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{
		live: map[string]map[int32]*req{}, commits: map[Partition][]int64{},
		leader: map[genKey]map[string][]byte{}, got: map[genKey]map[string][]byte{},
		injected: map[[2]int16]int{}, fences: map[string][]string{},
	}
}

// slack is what a request may take past its own timeout before it counts as hung: the
// broker's answer to a JoinGroup at its rebalance timeout still has to be written.
const slack = 3 * time.Second

// defaultLimit is the bound of requests with no timeout of their own (Heartbeat,
// OffsetCommit, Metadata, ...): none waits for anything but the broker's own work, and a
// Heartbeat answered later than a session timeout has already cost its member.
const defaultLimit = 5 * time.Second

func limitOf(r kmsg.Request) time.Duration {
	if r == nil {
		return defaultLimit
	}
	ms := func(v int32) time.Duration { return time.Duration(v) * time.Millisecond }
	switch r := r.(type) {
	case *kmsg.FetchRequest:
		return ms(r.MaxWaitMillis) + slack
	case *kmsg.JoinGroupRequest:
		return ms(max(r.RebalanceTimeoutMillis, r.SessionTimeoutMillis)) + slack
	case *kmsg.ProduceRequest:
		return ms(r.TimeoutMillis) + slack
	case *kmsg.SyncGroupRequest:
		// It waits for the leader's SyncGroup, bounded by the rebalance timeout (not in
		// the request): the longest the run's clients use.
		return 2*defaultLimit + slack
	}
	return defaultLimit
}

func (r *Recorder) violate(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

func (r *Recorder) request(cn string, c *conn.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	m := r.live[cn]
	if m == nil {
		m = map[int32]*req{}
		r.live[cn] = m
	}
	if _, dup := m[c.CorrelationID]; dup {
		r.violate("invariant 3: %s correlation id %d in flight twice", cn, c.CorrelationID)
	}
	m[c.CorrelationID] = &req{key: c.Key, ver: c.Version, start: time.Now(), limit: limitOf(c.Req)}
	if s, ok := c.Req.(*kmsg.SyncGroupRequest); ok && len(s.GroupAssignment) > 0 {
		k := genKey{s.Group, s.Generation}
		sent := map[string][]byte{}
		for _, a := range s.GroupAssignment {
			sent[a.MemberID] = a.MemberAssignment
		}
		if old, ok := r.leader[k]; ok && !sameAssignments(old, sent) {
			r.violate("invariant 2: group %q generation %d: the leader sent two different assignments", s.Group, s.Generation)
		}
		r.leader[k] = sent
	}
}

func sameAssignments(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for m, x := range a {
		if y, ok := b[m]; !ok || !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}

func (r *Recorder) response(cn string, c *conn.Call, resp kmsg.Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.live[cn]
	if _, ok := m[c.CorrelationID]; !ok {
		r.violate("invariant 3: %s %s correlation id %d answered twice (or never asked)", cn, kmsg.NameForKey(c.Key), c.CorrelationID)
		return
	}
	delete(m, c.CorrelationID)
	switch resp := resp.(type) {
	case *kmsg.OffsetCommitResponse:
		q := c.Req.(*kmsg.OffsetCommitRequest)
		asked := map[string]map[int32]int64{}
		for _, t := range q.Topics {
			asked[t.Topic] = map[int32]int64{}
			for _, p := range t.Partitions {
				asked[t.Topic][p.Partition] = p.Offset
			}
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					continue
				}
				off, ok := asked[t.Topic][p.Partition]
				if !ok {
					r.violate("invariant 1: group %q: commit of %s/%d acknowledged, never asked", q.Group, t.Topic, p.Partition)
					continue
				}
				k := Partition{q.Group, t.Topic, p.Partition}
				r.commits[k] = append(r.commits[k], off)
			}
		}
	case *kmsg.ConsumerGroupHeartbeatResponse:
		if resp.ErrorCode == kerr.FencedMemberEpoch.Code || resp.ErrorCode == kerr.UnknownMemberID.Code {
			q := c.Req.(*kmsg.ConsumerGroupHeartbeatRequest)
			r.fences[q.Group] = append(r.fences[q.Group], fmt.Sprintf("%s %s at epoch %d (%s)", q.MemberID, kerr.ErrorForCode(resp.ErrorCode), q.MemberEpoch, time.Now().Format("15:04:05.000")))
		}
	case *kmsg.SyncGroupResponse:
		if resp.ErrorCode != 0 {
			return
		}
		q := c.Req.(*kmsg.SyncGroupRequest)
		k := genKey{q.Group, q.Generation}
		g := r.got[k]
		if g == nil {
			g = map[string][]byte{}
			r.got[k] = g
		}
		if old, ok := g[q.MemberID]; ok && !bytes.Equal(old, resp.MemberAssignment) {
			r.violate("invariant 2: group %q generation %d: member %s handed two different assignments", q.Group, q.Generation, q.MemberID)
		}
		g[q.MemberID] = resp.MemberAssignment
	}
}

func (r *Recorder) closed(cn string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for corr, q := range r.live[cn] {
		// A client closes a connection whose request outlived its timeout: the hang
		// ends with the close, and still counts.
		if waited := now.Sub(q.start); waited > q.limit {
			r.violate("invariant 3: %s %s v%d correlation id %d waited %v (from %s), past its %v, until its connection closed", cn, kmsg.NameForKey(q.key), q.ver, corr, waited.Round(time.Millisecond), q.start.Format("15:04:05.000"), q.limit)
		}
	}
	delete(r.live, cn)
}

func (r *Recorder) injectedCode(key, code int16) {
	r.mu.Lock()
	r.injected[[2]int16{key, code}]++
	r.mu.Unlock()
}

// Injected is how many requests of API key were answered with code by the injector.
func (r *Recorder) Injected() map[[2]int16]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[[2]int16]int{}
	for k, v := range r.injected {
		out[k] = v
	}
	return out
}

// Fences are the consumer-protocol heartbeats answered FENCED_MEMBER_EPOCH or
// UNKNOWN_MEMBER_ID, by group.
func (r *Recorder) Fences() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for g, fs := range r.fences {
		out[g] = append([]string(nil), fs...)
	}
	return out
}

// Requests is how many requests were seen.
func (r *Recorder) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Violations are what the recorder saw go wrong as it happened.
func (r *Recorder) Violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.violations...)
}

// CheckRequests is invariant 3: no request waits past its timeout; final (every
// connection closed) means none may wait at all.
func (r *Recorder) CheckRequests(final bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	now := time.Now()
	for cn, m := range r.live {
		for corr, q := range m {
			waited := now.Sub(q.start)
			switch {
			case final:
				out = append(out, fmt.Sprintf("invariant 3: %s %s correlation id %d: no response and no close after %v", cn, kmsg.NameForKey(q.key), corr, waited.Round(time.Millisecond)))
			case waited > q.limit:
				out = append(out, fmt.Sprintf("invariant 3: %s %s correlation id %d waits %v, past its %v", cn, kmsg.NameForKey(q.key), corr, waited.Round(time.Millisecond), q.limit))
			}
		}
	}
	sort.Strings(out)
	return out
}

// CheckAssignments is invariant 2: within a generation each member was handed exactly
// what its leader sent for it, and no partition was given to two members. It returns the
// violations and how many generations were checked.
func (r *Recorder) CheckAssignments() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	checked := 0
	for k, sent := range r.leader {
		checked++
		owner := map[string]string{}
		for member, b := range sent {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(b); err != nil {
				out = append(out, fmt.Sprintf("invariant 2: group %q generation %d: the leader's assignment for %s does not decode: %v", k.group, k.gen, member, err))
				continue
			}
			for _, t := range a.Topics {
				for _, p := range t.Partitions {
					tp := fmt.Sprintf("%s/%d", t.Topic, p)
					if o, dup := owner[tp]; dup {
						out = append(out, fmt.Sprintf("invariant 2: group %q generation %d: %s given to %s and %s", k.group, k.gen, tp, o, member))
					}
					owner[tp] = member
				}
			}
		}
	}
	for k, got := range r.got {
		sent, ok := r.leader[k]
		if !ok {
			// A generation saved before this run (a restart's): no leader was seen.
			continue
		}
		for member, b := range got {
			want, ok := sent[member]
			if !ok {
				if len(b) > 0 {
					out = append(out, fmt.Sprintf("invariant 2: group %q generation %d: %s handed an assignment its leader never sent", k.group, k.gen, member))
				}
				continue
			}
			if !bytes.Equal(b, want) {
				out = append(out, fmt.Sprintf("invariant 2: group %q generation %d: %s handed %x, its leader sent %x", k.group, k.gen, member, b, want))
			}
		}
	}
	sort.Strings(out)
	return out, checked
}

// CheckCommits is invariant 1: acknowledged commits of a partition never go backwards,
// and what the broker holds at the end (committed) is the last acknowledged. It returns
// the violations and how many acknowledged commits were checked.
func (r *Recorder) CheckCommits(committed map[Partition]int64) ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	n := 0
	for k, offs := range r.commits {
		n += len(offs)
		for i := 1; i < len(offs); i++ {
			if offs[i] < offs[i-1] {
				out = append(out, fmt.Sprintf("invariant 1: %s %s/%d: acknowledged commit %d after %d", k.Group, k.Topic, k.Partition, offs[i], offs[i-1]))
			}
		}
		last := offs[len(offs)-1]
		got, ok := committed[k]
		if !ok || got < last {
			out = append(out, fmt.Sprintf("invariant 1: %s %s/%d: last acknowledged commit %d, broker holds %d (present %v)", k.Group, k.Topic, k.Partition, last, got, ok))
		}
	}
	sort.Strings(out)
	return out, n
}
