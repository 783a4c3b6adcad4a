package broker_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
	"kaas/storage"
)

// Two brokers on one data dir with the authorizer: a denied principal gets the same
// answer for either broker's group from either broker (never NOT_COORDINATOR, never a
// node); an ACL one broker writes to the shared acls.json is in force on both; allowed,
// the same requests are routed.
func TestClusterAuthorizationBeforeRoutingOnEveryBroker(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	for i := range cfgs {
		cfgs[i].Authorizer = "simple"
		cfgs[i].SecurityFilesPoll = 10 * time.Millisecond
	}
	b0 := brokertest.StartWith(t, cfgs[0])
	b1 := brokertest.StartWith(t, cfgs[1])
	waitReady(t, b0, b1)
	g0, g1 := groupOf(0, 2, "sec"), groupOf(1, 2, "sec")
	heartbeat := func(addr, g string) int16 {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation = g, "m", 1
		r, err := directClient(t, addr).SeedBrokers()[0].Request(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*kmsg.HeartbeatResponse).ErrorCode
	}
	denied := func() {
		t.Helper()
		for _, b := range []string{b0.Addr(), b1.Addr()} {
			for _, g := range []string{g0, g1} {
				if node, code := findCoordinator(t, directClient(t, b), g); code != 30 || node != -1 {
					t.Errorf("denied FindCoordinator %s at %s: node %d code %d", g, b, node, code)
				}
				if code := heartbeat(b, g); code != 30 {
					t.Errorf("denied Heartbeat %s at %s: %d", g, b, code)
				}
			}
		}
	}
	denied()
	// Another writer of the shared file (an operator's tool, a third broker).
	w, err := auth.NewAuthorizer(auth.AuthorizerConfig{Dir: filepath.Join(cfgs[0].DataDir, "__cluster"), FS: storage.OSFS{}, Log: brokertest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	v0, v1 := b0.Env().Authorizer.Version(), b1.Env().Authorizer.Version()
	if err := w.Create([]auth.ACL{{ResourceType: auth.Group, ResourceName: "sec-", PatternType: auth.Prefixed,
		Principal: "User:ANONYMOUS", Host: "*", Operation: auth.Read, Permission: auth.Allow}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, 5*time.Millisecond, testwait.Cond("both brokers read the ACL file", func() bool {
		return b0.Env().Authorizer.Version() != v0 && b1.Env().Authorizer.Version() != v1
	}))
	// Allowed, the requests are routed, once the brokers see each other (until then
	// broker 0 coordinates every group, the alive-subset fallback).
	testwait.For(t, 10*time.Second, 5*time.Millisecond, testwait.Cond("broker 0 routes broker 1's group", func() bool {
		node, code := findCoordinator(t, directClient(t, b0.Addr()), g1)
		return code == 0 && node == 1 && heartbeat(b0.Addr(), g1) == 16
	}))
	if code := heartbeat(b1.Addr(), g1); code == 16 || code == 30 {
		t.Errorf("allowed Heartbeat of broker 1's group at broker 1: %d", code)
	}
	// With routing settled, the ACL gone: denied alike again, from both brokers.
	v0, v1 = b0.Env().Authorizer.Version(), b1.Env().Authorizer.Version()
	if _, err := w.Delete([]auth.Filter{{ResourceType: auth.AnyResource, PatternType: auth.AnyPattern,
		Operation: auth.AnyOperation, Permission: auth.AnyPermission}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, 5*time.Millisecond, testwait.Cond("both brokers read the ACL file", func() bool {
		return b0.Env().Authorizer.Version() != v0 && b1.Env().Authorizer.Version() != v1
	}))
	denied()
}
