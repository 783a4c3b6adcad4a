package conn

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/group"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/auth"
	"kaas/config"
	"kaas/metrics"
	"kaas/registry"
	"kaas/storage"
)

// TxnOffsetCommit and OffsetFetch's require_stable over a real socket: connection actors
// in front of a real groups manager, its offsets actors and the offsets journal, with a
// transaction coordinator stand-in (Env.VerifyTxnGroup) that answers what the test says.

type txnWire struct {
	t    *testing.T
	addr string
	env  *Env
	mu   sync.Mutex
	code int16      // the coordinator stand-in's answer
	seen []TxnGroup // what it was asked
}

func (w *txnWire) answer(code int16) {
	w.mu.Lock()
	w.code = code
	w.mu.Unlock()
}

func (w *txnWire) asked() []TxnGroup {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]TxnGroup(nil), w.seen...)
}

// serveTxn starts the stand-in coordinator (nil when !coordinator), the groups side and
// a listener of connection actors.
func serveTxn(t *testing.T, coordinator bool) *txnWire {
	t.Helper()
	return serveTxnAuthz(t, coordinator, nil)
}

// serveTxnAuthz is serveTxn with the simple authorizer over acls (nil: authorization off).
func serveTxnAuthz(t *testing.T, coordinator bool, acls []auth.ACL) *txnWire {
	t.Helper()
	w := &txnWire{t: t}
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	log := zerolog.Nop()
	sys := actor.NewSystem(log)
	fsys := storage.OSFS{}
	odir, jdir := offsets.Dir(cfg.DataDir), offsets.JournalDir(cfg.DataDir, 0)
	replayed, err := offsets.Replay(offsets.ReplayConfig{FS: fsys, OffsetsDir: odir, JournalDir: jdir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	jpid := sys.Spawn(journal.Props(journal.Config{Dir: jdir, FS: fsys, Log: log, Recovered: replayed,
		SegmentBytes: 64 << 10, Save: offsets.GroupFileSaver(fsys, odir)}))
	groups := sys.Spawn(group.ManagerProps(group.ManagerConfig{
		Settings: group.Settings{
			InitialRebalanceDelay: time.Millisecond, MinSessionTimeout: time.Millisecond,
			MaxSessionTimeout: time.Hour, MaxSize: 100, IdlePassivation: time.Hour,
			OffsetsRetention: 24 * time.Hour,
		},
		Offsets: func(g string) *actor.Props {
			return offsets.Props(offsets.Config{Group: g, Dir: odir, FS: fsys, Log: log, Journal: jpid})
		},
		ListGroupIDs: func() ([]string, error) { return offsets.ListGroupIDs(fsys, odir) },
		ReadMeta: func(g string) (offsets.GroupMeta, bool, error) {
			return offsets.ReadMeta(fsys, odir, g)
		},
		Log: log,
	}))
	env := &Env{Config: &cfg, ClusterID: "test", System: sys, Metrics: metrics.New(), Log: log,
		Registry: registry.NewDev(registry.Broker{}), Groups: groups}
	if acls != nil {
		authz, err := auth.NewAuthorizer(auth.AuthorizerConfig{Dir: cfg.DataDir, FS: fsys, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		if len(acls) > 0 {
			if err := authz.Create(acls); err != nil {
				t.Fatal(err)
			}
		}
		env.Authorizer = authz
	}
	if coordinator {
		env.VerifyTxnGroup = func(c *Call, v TxnGroup, then func(int16) kmsg.Response) {
			w.mu.Lock()
			w.seen = append(w.seen, v)
			code := w.code
			w.mu.Unlock()
			// Answered through a promise, as the coordinator's actor answers.
			c.Await(func(any) kmsg.Response { return then(code) }).Resolve(nil)
		}
	}
	w.env = env
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = ln.Addr().String()
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			sys.Spawn(Props(Config{Env: env, Conn: nc, Listener: "PLAINTEXT", MaxFrame: 1 << 20,
				Idle: time.Minute, MaxInflight: 8}))
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		rw := sys.NewWaiter()
		sys.Send(groups, &group.Release{Keep: func(string) bool { return false }, Reply: rw.Promise})
		rw.Wait(time.Minute)
		_ = sys.Poison(groups, time.Minute)
		_ = sys.Poison(jpid, time.Minute)
		sys.Shutdown()
	})
	return w
}

// do sends req on a fresh connection at the version req carries.
func (w *txnWire) do(req kmsg.Request) kmsg.Response {
	w.t.Helper()
	nc, err := net.Dial("tcp", w.addr)
	if err != nil {
		w.t.Fatal(err)
	}
	defer nc.Close()
	f := kmsg.NewRequestFormatter()
	if _, err := nc.Write(f.AppendRequest(nil, req, 1)); err != nil {
		w.t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := readFull(nc, size[:]); err != nil {
		w.t.Fatal(err)
	}
	b := make([]byte, int(size[0])<<24|int(size[1])<<16|int(size[2])<<8|int(size[3]))
	if _, err := readFull(nc, b); err != nil {
		w.t.Fatal(err)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	b = b[4:] // the correlation id
	if resp.IsFlexible() {
		b = b[1:] // the response header's empty tag buffer
	}
	if err := resp.ReadFrom(b); err != nil {
		w.t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

// txnCommit sends a TxnOffsetCommit of topic t's partitions (offset = value) at version v
// and returns each partition's code.
func (w *txnWire) txnCommit(v int16, g string, pid int64, member string, gen int32, parts map[int32]int64) map[int32]int16 {
	w.t.Helper()
	return w.txnCommitTopics(v, g, pid, member, gen, map[string]map[int32]int64{"t": parts})["t"]
}

// txnCommitTopics is txnCommit over several topics.
func (w *txnWire) txnCommitTopics(v int16, g string, pid int64, member string, gen int32, topics map[string]map[int32]int64) map[string]map[int32]int16 {
	w.t.Helper()
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version = v
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = "tx", g, pid, 0
	req.MemberID, req.Generation = member, gen
	for topic, parts := range topics {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		for p, off := range parts {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, off
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp := w.do(req).(*kmsg.TxnOffsetCommitResponse)
	out := map[string]map[int32]int16{}
	for _, t := range resp.Topics {
		out[t.Topic] = map[int32]int16{}
		for _, p := range t.Partitions {
			out[t.Topic][p.Partition] = p.ErrorCode
		}
	}
	return out
}

type fetched struct {
	offset int64
	code   int16
}

// fetch sends OffsetFetch at v for t-0..t-2 and returns each partition's answer.
func (w *txnWire) fetch(v int16, g string, stable bool) map[int32]fetched {
	w.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = v
	req.RequireStable = stable
	out := map[int32]fetched{}
	if v >= 8 {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.Partitions = "t", []int32{0, 1, 2}
		rg.Topics = append(rg.Topics, rt)
		req.Groups = append(req.Groups, rg)
		resp := w.do(req).(*kmsg.OffsetFetchResponse)
		for _, t := range resp.Groups[0].Topics {
			for _, p := range t.Partitions {
				out[p.Partition] = fetched{p.Offset, p.ErrorCode}
			}
		}
		return out
	}
	req.Group = g
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "t", []int32{0, 1, 2}
	req.Topics = append(req.Topics, rt)
	resp := w.do(req).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 {
		w.t.Fatalf("OffsetFetch v%d: top-level %d", v, resp.ErrorCode)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = fetched{p.Offset, p.ErrorCode}
		}
	}
	return out
}

// marker sends the coordinator's TxnOffsetMarker to the groups manager.
func (w *txnWire) marker(g string, pid int64, commit bool) int16 {
	w.t.Helper()
	ww := w.env.System.NewWaiter()
	w.env.System.Send(w.env.Groups, &group.TxnOffsetMarker{Group: g, ProducerID: pid, Commit: commit, Reply: ww.Promise})
	v, ok := ww.Wait(10 * time.Second)
	if !ok {
		w.t.Fatal("TxnOffsetMarker: no answer")
	}
	return v.(*group.TxnOffsetMarked).ErrorCode
}

// TestTxnOffsetCommitRequireStablePerPartition: pending transactional offsets are
// invisible to OffsetFetch, and require_stable answers UNSTABLE_OFFSET_COMMIT with
// offset -1 for exactly the partitions that have one (kfake marks the whole group);
// the commit marker makes them the committed offsets.
func TestTxnOffsetCommitRequireStablePerPartition(t *testing.T) {
	w := serveTxn(t, true)
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Version, oc.Group, oc.Generation = 8, "g", -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	for p, off := range map[int32]int64{0: 1, 2: 5} {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, off
		rt.Partitions = append(rt.Partitions, rp)
	}
	oc.Topics = append(oc.Topics, rt)
	for _, tp := range w.do(oc).(*kmsg.OffsetCommitResponse).Topics[0].Partitions {
		if tp.ErrorCode != 0 {
			t.Fatalf("OffsetCommit: %v", kerr.ErrorForCode(tp.ErrorCode))
		}
	}
	if got := w.txnCommit(5, "g", 7, "", -1, map[int32]int64{0: 10, 1: 11}); got[0] != 0 || got[1] != 0 {
		t.Fatalf("TxnOffsetCommit v5: %v", got)
	}
	if a := w.asked(); len(a) != 1 || a[0] != (TxnGroup{TransactionalID: "tx", ProducerID: 7, Group: "g", Add: true}) {
		t.Fatalf("coordinator asked %+v, want one implicit add (v5)", a)
	}
	unstable := fetched{-1, kerr.UnstableOffsetCommit.Code}
	for _, v := range []int16{7, 8, 9} {
		got := w.fetch(v, "g", true)
		if got[0] != unstable || got[1] != unstable || got[2] != (fetched{5, 0}) {
			t.Fatalf("OffsetFetch v%d require_stable: %+v", v, got)
		}
		got = w.fetch(v, "g", false)
		if got[0] != (fetched{1, 0}) || got[1] != (fetched{-1, 0}) || got[2] != (fetched{5, 0}) {
			t.Fatalf("OffsetFetch v%d: %+v, want the committed offsets only", v, got)
		}
	}
	if c := w.marker("g", 7, true); c != 0 {
		t.Fatalf("commit marker: %v", kerr.ErrorForCode(c))
	}
	if c := w.marker("g", 7, true); c != 0 {
		t.Fatalf("retried commit marker: %v", kerr.ErrorForCode(c))
	}
	if got := w.fetch(8, "g", true); got[0] != (fetched{10, 0}) || got[1] != (fetched{11, 0}) || got[2] != (fetched{5, 0}) {
		t.Fatalf("after the commit marker: %+v", got)
	}
	// An aborted transaction's offsets never show.
	if got := w.txnCommit(4, "g", 8, "", -1, map[int32]int64{2: 99}); got[2] != 0 {
		t.Fatalf("TxnOffsetCommit v4: %v", got)
	}
	if c := w.marker("g", 8, false); c != 0 {
		t.Fatalf("abort marker: %v", kerr.ErrorForCode(c))
	}
	if got := w.fetch(8, "g", true); got[2] != (fetched{5, 0}) {
		t.Fatalf("after the abort marker: %+v", got)
	}
}

// TestTxnOffsetCommitCodesByVersion: the transaction coordinator's refusals as each
// version knows them, and no coordinator at all.
func TestTxnOffsetCommitCodesByVersion(t *testing.T) {
	w := serveTxn(t, true)
	for _, c := range []struct {
		answer  int16
		version int16
		want    int16
	}{
		{kerr.ProducerFenced.Code, 0, kerr.InvalidProducerEpoch.Code},
		{kerr.ProducerFenced.Code, 5, kerr.InvalidProducerEpoch.Code},
		{kerr.TransactionAbortable.Code, 3, kerr.InvalidTxnState.Code},
		{kerr.TransactionAbortable.Code, 4, kerr.TransactionAbortable.Code},
		{kerr.InvalidTxnState.Code, 2, kerr.InvalidTxnState.Code},
		{kerr.InvalidProducerIDMapping.Code, 1, kerr.InvalidProducerIDMapping.Code},
		{kerr.ConcurrentTransactions.Code, 5, kerr.ConcurrentTransactions.Code},
		{kerr.NotCoordinator.Code, 5, kerr.CoordinatorNotAvailable.Code},
	} {
		w.answer(c.answer)
		if got := w.txnCommit(c.version, "g", 7, "", -1, map[int32]int64{0: 1}); got[0] != c.want {
			t.Errorf("coordinator %v at v%d: %v, want %v", kerr.ErrorForCode(c.answer), c.version,
				kerr.ErrorForCode(got[0]), kerr.ErrorForCode(c.want))
		}
	}
	for i, a := range w.asked() {
		if a.Add != (i == 1 || i == 6 || i == 7) {
			t.Errorf("ask %d: Add %v, want it only for v5", i, a.Add)
		}
	}
	w.answer(0)
	if got := w.txnCommit(3, "", 7, "", -1, map[int32]int64{0: 1}); got[0] != kerr.InvalidGroupID.Code {
		t.Errorf("empty group id: %v", kerr.ErrorForCode(got[0]))
	}
	if got := w.fetch(8, "g", true); got[0] != (fetched{-1, 0}) {
		t.Errorf("a refused TxnOffsetCommit left %+v", got[0])
	}

	none := serveTxn(t, false)
	if got := none.txnCommit(5, "g", 7, "", -1, map[int32]int64{0: 1}); got[0] != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("no transaction coordinator: %v", kerr.ErrorForCode(got[0]))
	}
}

// TestTxnOffsetCommitFencesZombie: from v3 the group checks generation, member and
// instance as OffsetCommit does; a consumer of an earlier generation (a zombie) is
// fenced, and v0-2, which carry none, are accepted.
func TestTxnOffsetCommitFencesZombie(t *testing.T) {
	w := serveTxn(t, true)
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 3, "g", 30000, 30000
	join.ProtocolType = "consumer"
	jp := kmsg.NewJoinGroupRequestProtocol()
	jp.Name = "range"
	join.Protocols = append(join.Protocols, jp)
	j := w.do(join).(*kmsg.JoinGroupResponse)
	if j.ErrorCode != 0 {
		t.Fatalf("JoinGroup: %v", kerr.ErrorForCode(j.ErrorCode))
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version, sync.Group, sync.MemberID, sync.Generation = 3, "g", j.MemberID, j.Generation
	if s := w.do(sync).(*kmsg.SyncGroupResponse); s.ErrorCode != 0 {
		t.Fatalf("SyncGroup: %v", kerr.ErrorForCode(s.ErrorCode))
	}
	for _, c := range []struct {
		name    string
		version int16
		member  string
		gen     int32
		want    int16
	}{
		{"zombie generation", 3, j.MemberID, j.Generation - 1, kerr.IllegalGeneration.Code},
		{"unknown member", 5, "zombie", j.Generation, kerr.UnknownMemberID.Code},
		{"current member", 5, j.MemberID, j.Generation, 0},
		{"v2 carries no member", 2, "ignored", 99, 0},
	} {
		if got := w.txnCommit(c.version, "g", 7, c.member, c.gen, map[int32]int64{0: 1}); got[0] != c.want {
			t.Errorf("%s (v%d): %v, want %v", c.name, c.version, kerr.ErrorForCode(got[0]), kerr.ErrorForCode(c.want))
		}
	}
}

// TestTxnOffsetCommitAuthorization: Apache's order — WRITE on the transactional id, then
// READ on the group (each failing every partition), then READ per topic (that topic's
// partitions); what passes goes on.
func TestTxnOffsetCommitAuthorization(t *testing.T) {
	allow := func(rt auth.ResourceType, name string, op auth.Operation) auth.ACL {
		return auth.ACL{ResourceType: rt, ResourceName: name, PatternType: auth.Literal,
			Principal: "User:ANONYMOUS", Host: "*", Operation: op, Permission: auth.Allow}
	}
	txid := allow(auth.TransactionalID, "tx", auth.Write)
	grp := allow(auth.Group, "g", auth.Read)
	topic := allow(auth.Topic, "t", auth.Read)
	for _, c := range []struct {
		name string
		acls []auth.ACL
		t, u int16
	}{
		{"nothing", []auth.ACL{}, kerr.TransactionalIDAuthorizationFailed.Code, kerr.TransactionalIDAuthorizationFailed.Code},
		{"group and topics, no transactional id", []auth.ACL{grp, topic, allow(auth.Topic, "u", auth.Read)},
			kerr.TransactionalIDAuthorizationFailed.Code, kerr.TransactionalIDAuthorizationFailed.Code},
		{"transactional id only", []auth.ACL{txid, topic}, kerr.GroupAuthorizationFailed.Code, kerr.GroupAuthorizationFailed.Code},
		{"one topic", []auth.ACL{txid, grp, topic}, 0, kerr.TopicAuthorizationFailed.Code},
	} {
		w := serveTxnAuthz(t, true, c.acls)
		got := w.txnCommitTopics(5, "g", 7, "", -1, map[string]map[int32]int64{"t": {0: 1}, "u": {0: 1}})
		if got["t"][0] != c.t || got["u"][0] != c.u {
			t.Errorf("%s: t %v, u %v; want %v, %v", c.name, kerr.ErrorForCode(got["t"][0]), kerr.ErrorForCode(got["u"][0]),
				kerr.ErrorForCode(c.t), kerr.ErrorForCode(c.u))
		}
	}
}
