package broker_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

// offsetCommit is an OffsetCommit v7 of partition 0 of topic t at offset at.
func offsetCommit(group, t string, at int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 7
	req.Group = group
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = t
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition = 0
	rp.Offset = at
	rp.LeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// A broker alone stops gracefully without releasing its groups one by one: it halts
// them (only the group with a member is told, and its parked JoinGroup is answered
// NOT_COORDINATOR), the commits in flight are each answered once durable or not at all
// (their connection closes), and the next start on the same data dir serves every
// acknowledged commit: hundreds of live groups whose files are all behind the journal
// (a checkpoint interval of an hour), and committers pipelining commits while the
// broker stops.
func TestStopAloneKeepsEveryAcknowledgedCommit(t *testing.T) {
	dir := t.TempDir()
	c := brokertest.Config(t)
	c.DataDir = dir
	c.OffsetsCheckpointInterval = time.Hour
	c.GroupInitialRebalanceDelay = time.Hour // the JoinGroup below stays parked
	b, logs, err := brokertest.StartLogged(t, c)
	if err != nil {
		t.Fatal(err)
	}
	admin := brokertest.Dial(t, b.Addr())
	create := kmsg.NewPtrCreateTopicsRequest()
	create.Version = 4
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "t", 1, 1
	create.Topics = append(create.Topics, ct)
	if r := admin.Roundtrip(create, 1).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic: %d", r.Topics[0].ErrorCode)
	}

	// Live groups, one commit each, all pipelined on one connection.
	const live = 300
	var batch []byte
	for i := range live {
		batch = append(batch, admin.Encode(offsetCommit("live-"+strconv.Itoa(i), "t", int64(i)), int32(100+i))...)
	}
	admin.Write(batch)
	for i := range live {
		resp := kmsg.NewPtrOffsetCommitResponse()
		resp.Version = 7
		if corr := admin.Recv(resp); corr != int32(100+i) || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("commit of live-%d: correlation %d, %+v", i, corr, resp.Topics[0].Partitions[0])
		}
	}

	// A member whose JoinGroup waits for the initial rebalance delay.
	member := brokertest.Dial(t, b.Addr())
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 3
	join.Group = "members"
	join.SessionTimeoutMillis = 30_000
	join.RebalanceTimeoutMillis = 60_000
	join.ProtocolType = "consumer"
	jp := kmsg.NewJoinGroupRequestProtocol()
	jp.Name, jp.Metadata = "range", []byte{0, 0}
	join.Protocols = append(join.Protocols, jp)
	member.Send(join, 1)

	// Committers pipelining commits, each to its own group at rising offsets, while the
	// broker stops. The first answer of each is read before the stop begins.
	const committers, each = 8, 200
	acked := make([]int64, committers)
	var wg sync.WaitGroup
	conns := make([]*brokertest.Raw, committers)
	for k := range committers {
		r := brokertest.Dial(t, b.Addr())
		conns[k] = r
		var reqs []byte
		for i := range each {
			reqs = append(reqs, r.Encode(offsetCommit("inflight-"+strconv.Itoa(k), "t", int64(i+1)), int32(i))...)
		}
		r.Write(reqs)
		resp := kmsg.NewPtrOffsetCommitResponse()
		resp.Version = 7
		if corr := r.Recv(resp); corr != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("first commit of committer %d: correlation %d, %+v", k, corr, resp.Topics[0].Partitions[0])
		}
		acked[k] = 1
	}
	for k, r := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// In order, until the connection closes: code 0 is an acknowledgement.
			for next := int32(1); ; next++ {
				frame, err := r.ReadFrame(30 * time.Second)
				if err != nil {
					return
				}
				resp := kmsg.NewPtrOffsetCommitResponse()
				resp.Version = 7
				corr, err := brokertest.Decode(frame, resp)
				if err != nil || corr != next {
					t.Errorf("committer %d: correlation %d (err %v), want %d", k, corr, err, next)
					return
				}
				if resp.Topics[0].Partitions[0].ErrorCode == 0 {
					acked[k] = int64(next) + 1
				}
			}
		}()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("commits acknowledged up to %v of %d each", acked, each)

	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Version = 3
	frame, err := member.ReadFrame(10 * time.Second)
	if err == nil {
		if _, err := brokertest.Decode(frame, resp); err != nil || resp.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("parked JoinGroup answered %d (err %v), want NOT_COORDINATOR", resp.ErrorCode, err)
		}
	}
	stopped := logs.Events("kaas_stopped")
	if len(stopped) != 1 || !strings.Contains(stopped[0], `"drained":true`) {
		t.Fatalf("kaas_stopped: %q, want one line with drained true", stopped)
	}
	halted := logs.Events("groups_halted")
	if len(halted) != 1 || !strings.Contains(halted[0], `"groups_with_members":1`) {
		t.Fatalf("groups_halted: %q, want one line telling the one group with a member", halted)
	}
	if n := logs.Count("groups_released"); n != 0 {
		t.Fatalf("a broker alone's stop released its groups one by one (%d lines)", n)
	}

	c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 0}}
	again := brokertest.StartWith(t, c)
	r := brokertest.Dial(t, again.Addr())
	fetch := func(group string, corr int32) int64 {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = 7
		req.Group = group
		resp := r.Roundtrip(req, corr).(*kmsg.OffsetFetchResponse)
		if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch %s after the restart: %+v", group, resp)
		}
		return resp.Topics[0].Partitions[0].Offset
	}
	for i := range live {
		if got := fetch("live-"+strconv.Itoa(i), int32(i)); got != int64(i) {
			t.Fatalf("live-%d after the restart: offset %d, want %d", i, got, i)
		}
	}
	for k := range committers {
		got := fetch("inflight-"+strconv.Itoa(k), int32(live+k))
		if got < acked[k] || got > each {
			t.Fatalf("inflight-%d after the restart: offset %d, acknowledged up to %d (of %d sent)", k, got, acked[k], each)
		}
	}
}
