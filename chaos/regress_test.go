package chaos

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// panicOnce panics the first actor of kind that gets a message of type msgType.
type panicOnce struct {
	in      *Injector
	kind    string
	msgType string
	fired   atomic.Bool
}

func (p *panicOnce) Receive(a actor.Actor, msg any) bool {
	if p.in.actorKind(a) != p.kind || typeName(msg) != p.msgType {
		return false
	}
	return p.fired.CompareAndSwap(false, true)
}

func (p *panicOnce) Timer(_ any, d time.Duration) (time.Duration, bool) { return d, false }

// A connection actor that panics is not restarted on its socket: the connection closes
// (the client sees it), and the incarnation's reader and writer goroutines end. Found by
// seed 1: protoactor restarted it, the new incarnation started a second reader and writer
// on the same socket, and the first writer waited for ever on a channel nobody closed.
func TestConnectionPanicClosesConnection(t *testing.T) {
	leakOpts := actortest.LeakOptions(goleak.IgnoreCurrent())
	p := &panicOnce{in: New(0, nil), kind: "connection", msgType: "*conn.frame"}
	defer actor.SetFaults(p)()
	b, err := broker.Start(brokertest.Config(t), brokertest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	msg := kmsg.NewRequestFormatter().AppendRequest(nil, req, 1)
	if _, err := nc.Write(msg); err != nil {
		t.Fatal(err)
	}
	// The connection closes: the read ends without a response.
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	if n, err := nc.Read(buf); err == nil {
		t.Fatalf("read %d bytes after the connection actor panicked, want the connection closed", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection still open 10s after its actor panicked")
	}
	if !p.fired.Load() {
		t.Fatal("no panic injected")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := goleak.Find(leakOpts...); err != nil {
		t.Fatalf("goroutines of the panicked connection outlive the broker: %v", err)
	}
}

// A panic in the offsets journal's Receive while it takes an Append still answers that
// Append: the actor layer answers it with a failed write, and the journal goes on.
// Found by seed 1: the Append was dropped unanswered, its group's offsets actor waited
// for it for ever, and every later commit of the group queued behind it until the broker
// stopped. (Answering it with the failure at once, the first fix, was caught by seed 7:
// the answer overtook its group's Appends still queued, and the offsets actor, which then
// took answers only in order, dropped it and waited again; it now takes each answer for
// its batch and answers the batches in order.)
func TestJournalPanicAnswersTheAppend(t *testing.T) {
	p := &panicOnce{in: New(0, nil), kind: "journal", msgType: "*journal.Append"}
	defer actor.SetFaults(p)()
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RetryBackoffFn(backoff))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	commit := func(at int64) (kadm.OffsetResponses, error) {
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "t", Partition: 0, At: at, LeaderEpoch: -1})
		cctx, ccancel := context.WithTimeout(ctx, 8*time.Second)
		defer ccancel()
		return adm.CommitOffsets(cctx, "g", os)
	}
	// The first commit meets the panic: it is answered instead of hanging.
	if _, err := commit(5); err != nil {
		t.Fatalf("commit through a journal panic: %v", err)
	}
	if !p.fired.Load() {
		t.Fatal("no panic injected")
	}
	if _, err := commit(7); err != nil {
		t.Fatalf("commit after the panic: %v", err)
	}
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup("t", 0); o.At != 7 {
		t.Fatalf("committed %d, want 7", o.At)
	}
}

// A partition actor that panics handling a read answers the read (NOT_LEADER_OR_FOLLOWER,
// which the client retries after a metadata refresh) before it restarts. Found by seed
// 1: the read was dropped, and its Fetch waited for the fetcher's abandon timer (max
// wait + 10 s), past the client's request timeout; the client closed the connection.
func TestPartitionPanicAnswersTheRead(t *testing.T) {
	p := &panicOnce{in: New(0, nil), kind: "partition", msgType: "*partition.readLog"}
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RequestTimeoutOverhead(3*time.Second), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	created, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	defer actor.SetFaults(p)()
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 100, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = "t", created.ID // kgo sends the newest version both speak
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("fetch through a partition panic: %v (within the client's request timeout)", err)
	}
	if !p.fired.Load() {
		t.Fatalf("no panic injected; fetch answered %+v", resp.Topics)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch answered %d, want NOT_LEADER_OR_FOLLOWER", code)
	}
}

// A panic in the offsets journal's Receive while it takes its flush leaves the queued
// Appends a flush of their own. Found by seed 3: the flush message was gone with the
// panic and flushQueued stayed set, so no Append ever asked for another flush, every
// commit of every group waited for ever and the groups stayed CompletingRebalance
// (their generations could not be saved).
func TestJournalPanicInFlushFlushesLater(t *testing.T) {
	p := &panicOnce{in: New(0, nil), kind: "journal", msgType: "*journal.journalFlush"}
	defer actor.SetFaults(p)()
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RetryBackoffFn(backoff))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "t", Partition: 0, At: 3, LeaderEpoch: -1})
	cctx, ccancel := context.WithTimeout(ctx, 8*time.Second)
	defer ccancel()
	resp, err := adm.CommitOffsets(cctx, "g", os)
	if err != nil {
		t.Fatalf("commit through a panic in the journal's flush: %v", err)
	}
	if !p.fired.Load() {
		t.Fatal("no panic injected")
	}
	if err := resp.Error(); err != nil {
		t.Fatalf("commit answered %v", err)
	}
}

// A group actor that panics in its Receive before its handler takes a request answers
// that request (COORDINATOR_NOT_AVAILABLE, which the client retries) before it
// restarts. Found by seed 3: a Heartbeat dropped with the panic went unanswered until
// the client's request timeout; meanwhile the members' sessions expired and a static
// member stayed out of its group past rebalance + session timeout.
func TestGroupPanicAnswersTheRequest(t *testing.T) {
	p := &panicOnce{in: New(0, nil), kind: "group", msgType: "*group.JoinGroup"}
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RequestTimeoutOverhead(3*time.Second), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer actor.SetFaults(p)()
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.ProtocolType = "g", "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 3000, 3000
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name = "range"
	req.Protocols = append(req.Protocols, proto)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("join through a group actor panic: %v (within the client's request timeout)", err)
	}
	if !p.fired.Load() {
		t.Fatalf("no panic injected; join answered %d", resp.ErrorCode)
	}
	if resp.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("join answered %d, want COORDINATOR_NOT_AVAILABLE", resp.ErrorCode)
	}
}

// An offsets actor that panics in its Receive before a request reaches its handler
// answers the request (NOT_COORDINATOR for a commit, which the client retries) before it
// restarts. Found by seed 23: the Commit was dropped, the group waited for its answer,
// and the client's OffsetCommit went unanswered until the client gave up on it.
func TestOffsetsPanicAnswersTheCommit(t *testing.T) {
	p := &panicOnce{in: New(0, nil), kind: "offsets", msgType: "*offsets.Commit"}
	defer actor.SetFaults(p)()
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RetryBackoffFn(backoff))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "t", Partition: 0, At: 4, LeaderEpoch: -1})
	cctx, ccancel := context.WithTimeout(ctx, 8*time.Second)
	defer ccancel()
	if _, err := adm.CommitOffsets(cctx, "g", os); err != nil {
		t.Fatalf("commit through an offsets actor panic: %v", err)
	}
	if !p.fired.Load() {
		t.Fatal("no panic injected")
	}
	// The client retried the retriable answer; the commit is there.
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup("t", 0); o.At != 4 {
		t.Fatalf("committed %d, want 4", o.At)
	}
}

// A transactional id's actor that panics before it takes up an answer it waits for (here
// the producer id its InitProducerId asked the topics manager for; likewise a journal
// write's, the markers') takes it up after the panic. Found by seed 1: the actor resumes
// with its state after a panic (a fresh one could not rebuild it), but the answer was
// gone with the panic, so the actor stayed busy for ever: every later request of the id
// queued unanswered and its transaction stayed in PrepareAbort, holding back the last
// stable offset of its partitions.
func TestTransactionPanicTakesUpTheAnswer(t *testing.T) {
	p := &panicOnce{in: New(0, nil), kind: "transaction", msgType: "*actor.Settled"}
	defer actor.SetFaults(p)()
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"),
		kgo.RetryBackoffFn(backoff))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce through a transaction actor panic: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit through a transaction actor panic: %v", err)
	}
	if !p.fired.Load() {
		t.Fatal("no panic injected")
	}
	// The partition becomes stable: its last stable offset reaches its end, past the
	// commit marker the coordinator writes once the EndTxn is answered. Polling the
	// broker's state: no event to wait on.
	if err := testwait.Until(10*time.Second, 20*time.Millisecond, func() error {
		lso, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, "t")
		if err != nil {
			return err
		}
		if o, _ := lso.Lookup("t", 0); o.Offset != 2 {
			return fmt.Errorf("last stable offset %d, want 2 (the record and its commit marker)", o.Offset)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
