package conn

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/group"
	"kaas/auth"
	"kaas/cluster"
	"kaas/config"
	"kaas/metrics"
	"kaas/registry"
	"kaas/storage"
)

// serveTwoBrokerView runs connection actors for broker 0 of a two-broker cluster, with the
// simple authorizer over acls, and a groups manager stand-in that answers every Heartbeat
// UNKNOWN_MEMBER_ID: what the group would say.
func serveTwoBrokerView(t *testing.T, acls []auth.ACL) (string, *registry.Registry) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	sys := actor.NewSystem(zerolog.Nop())
	groups := sys.Spawn(actor.PropsOf(func() actor.Actor {
		return actorFunc(func(ctx actor.Context) {
			if hb, ok := ctx.Message().(*group.Heartbeat); ok {
				hb.Reply.Resolve(&group.Result{ErrorCode: kerr.UnknownMemberID.Code})
			}
		})
	}))
	authz, err := auth.NewAuthorizer(auth.AuthorizerConfig{Dir: cfg.DataDir, FS: storage.OSFS{}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if len(acls) > 0 {
		if err := authz.Create(acls); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	reg := registry.New(0, 2)
	reg.Set([]registry.Broker{
		{ID: 0, Alive: true, Endpoints: map[string]registry.Endpoint{"PLAINTEXT": {Host: "127.0.0.1", Port: port}}},
		{ID: 1, Alive: true, Endpoints: map[string]registry.Endpoint{"PLAINTEXT": {Host: "127.0.0.2", Port: 9}}},
	})
	reg.MarkSynced()
	// The ownership in force: the registry's view, applied.
	st := &cluster.State{View: reg.Snapshot(), Ready: true}
	env := &Env{Config: &cfg, ClusterID: "test", System: sys, Metrics: metrics.New(), Log: zerolog.Nop(),
		Registry: reg, Groups: groups, Authorizer: authz, Ownership: func() *cluster.State { return st }}
	var conns sync.WaitGroup
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			sys.Spawn(Props(Config{Env: env, Conn: nc, Listener: "PLAINTEXT", MaxFrame: 1 << 20,
				Idle: time.Minute, MaxInflight: 64, OnStop: conns.Done}))
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		sys.Shutdown()
	})
	return ln.Addr().String(), reg
}

// A denied principal gets the same bytes for a group this broker coordinates and for one
// another broker does: the check comes before the routing, so the answer says nothing of
// where the group lives. Allowed, the same requests are routed (NOT_COORDINATOR for the
// other broker's group; FindCoordinator names it).
func TestDeniedBeforeRouting(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		var acls []auth.ACL
		if allowed {
			acls = []auth.ACL{{ResourceType: auth.Group, ResourceName: "g-", PatternType: auth.Prefixed,
				Principal: "User:ANONYMOUS", Host: "*", Operation: auth.Read, Permission: auth.Allow}}
		}
		addr, reg := serveTwoBrokerView(t, acls)
		// Two names of one length: one this broker's, one broker 1's.
		var here, there string
		for _, g := range []string{"g-a", "g-b", "g-c", "g-d", "g-e", "g-f", "g-g", "g-h"} {
			if reg.IsCoordinator(g) && here == "" {
				here = g
			} else if !reg.IsCoordinator(g) && there == "" {
				there = g
			}
		}
		if here == "" || there == "" {
			t.Fatal("no group of each broker among the names")
		}
		ask := func(req kmsg.Request, v int16) (kmsg.Response, []byte) {
			req.SetVersion(v)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 3)); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			var size [4]byte
			if _, err := readFull(nc, size[:]); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, int(size[0])<<24|int(size[1])<<16|int(size[2])<<8|int(size[3]))
			if _, err := readFull(nc, b); err != nil {
				t.Fatal(err)
			}
			resp := req.ResponseKind()
			resp.SetVersion(v)
			body := b[4:]
			if resp.IsFlexible() {
				body = body[1:]
			}
			if err := resp.ReadFrom(body); err != nil {
				t.Fatal(err)
			}
			return resp, b
		}
		hb := func(g string) (int16, []byte) {
			req := kmsg.NewPtrHeartbeatRequest()
			req.Group, req.MemberID, req.Generation = g, "m", 1
			resp, b := ask(req, 4)
			return resp.(*kmsg.HeartbeatResponse).ErrorCode, b
		}
		fc := func(g string) (kmsg.FindCoordinatorResponseCoordinator, []byte) {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorKeys = []string{g}
			resp, b := ask(req, 6)
			return resp.(*kmsg.FindCoordinatorResponse).Coordinators[0], b
		}
		codeHere, rawHere := hb(here)
		codeThere, rawThere := hb(there)
		coHere, fcHere := fc(here)
		coThere, fcThere := fc(there)
		if !allowed {
			if codeHere != 30 || codeThere != 30 || !bytes.Equal(rawHere, rawThere) {
				t.Errorf("denied Heartbeat: %d / %d, bytes equal %v", codeHere, codeThere, bytes.Equal(rawHere, rawThere))
			}
			if coHere.ErrorCode != 30 || coThere.NodeID != -1 || !bytes.Equal(fcHere, bytes.Replace(fcThere, []byte(there), []byte(here), 1)) {
				t.Errorf("denied FindCoordinator: %+v / %+v", coHere, coThere)
			}
			continue
		}
		if codeHere != kerr.UnknownMemberID.Code || codeThere != kerr.NotCoordinator.Code {
			t.Errorf("allowed Heartbeat: here %d, there %d (want 25, 16)", codeHere, codeThere)
		}
		if coHere.NodeID != 0 || coThere.NodeID != 1 || coThere.Host != "127.0.0.2" {
			t.Errorf("allowed FindCoordinator: %+v / %+v", coHere, coThere)
		}
	}
}
