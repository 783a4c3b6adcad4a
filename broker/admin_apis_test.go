package broker_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/broker/brokertest"
	"kaas/config"
)

// request sends req at version v to the broker behind cl's first seed.
func request[R kmsg.Response](t *testing.T, cl *kgo.Client, req kmsg.Request, v int16) R {
	t.Helper()
	req.SetVersion(v)
	r, err := cl.SeedBrokers()[0].Request(context.Background(), req)
	if err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), v, err)
	}
	return r.(R)
}

func describeCluster(t *testing.T, cl *kgo.Client, v int16, mutate func(*kmsg.DescribeClusterRequest)) *kmsg.DescribeClusterResponse {
	t.Helper()
	req := kmsg.NewPtrDescribeClusterRequest()
	if mutate != nil {
		mutate(req)
	}
	return request[*kmsg.DescribeClusterResponse](t, cl, req, v)
}

// allClusterOperations are the CLUSTER operations Apache answers with no authorizer.
const allClusterOperations = 1<<4 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12

// DescribeCluster at every version: the cluster id, this broker as the one broker and as
// controller, with its endpoint on the listener asked; cluster_authorized_operations only
// when asked (every operation with authorization off); endpoint types other than brokers
// refused with Apache's codes.
func TestDescribeCluster(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.NodeID = 3 })
	cl := directClient(t, b.Addr())
	host, port, _ := net.SplitHostPort(b.Addr())
	for v := int16(0); v <= 2; v++ {
		r := describeCluster(t, cl, v, nil)
		if r.ErrorCode != 0 || r.ClusterID != b.ClusterID() || r.ControllerID != 3 || len(r.Brokers) != 1 {
			t.Fatalf("v%d: %+v", v, r)
		}
		if br := r.Brokers[0]; br.NodeID != 3 || br.Host != host || strconv.Itoa(int(br.Port)) != port || br.IsFenced {
			t.Fatalf("v%d broker: %+v, want 3 at %s", v, br, b.Addr())
		}
		if r.ClusterAuthorizedOperations != -2147483648 {
			t.Fatalf("v%d: authorized operations %d not asked for", v, r.ClusterAuthorizedOperations)
		}
		if v >= 1 && r.EndpointType != 1 {
			t.Fatalf("v%d: endpoint type %d", v, r.EndpointType)
		}
		r = describeCluster(t, cl, v, func(r *kmsg.DescribeClusterRequest) { r.IncludeClusterAuthorizedOperations = true })
		if r.ClusterAuthorizedOperations != allClusterOperations {
			t.Fatalf("v%d: authorized operations %b, want %b", v, r.ClusterAuthorizedOperations, allClusterOperations)
		}
	}
	for _, tc := range []struct {
		typ  int8
		code int16
	}{{2, kerr.MismatchedEndpointType.Code}, {0, kerr.UnsupportedEndpointType.Code}, {7, kerr.UnsupportedEndpointType.Code}} {
		r := describeCluster(t, cl, 1, func(r *kmsg.DescribeClusterRequest) { r.EndpointType = tc.typ })
		if r.ErrorCode != tc.code || r.ErrorMessage == nil || len(r.Brokers) != 0 {
			t.Fatalf("endpoint type %d: %+v, want code %d", tc.typ, r, tc.code)
		}
	}
}

// With the authorizer on, anyone may describe the cluster; the authorized operations
// are none without DESCRIBE on the cluster, and what the ACLs allow with it.
func TestDescribeClusterAuthorizedOperations(t *testing.T) {
	b, admin := authzBroker(t)
	anon := directClient(t, b.ListenerAddr("PLAINTEXT"))
	ask := func(r *kmsg.DescribeClusterRequest) { r.IncludeClusterAuthorizedOperations = true }
	setACLs(t, admin)
	if r := describeCluster(t, anon, 2, ask); r.ErrorCode != 0 || len(r.Brokers) != 1 || r.ClusterAuthorizedOperations != 0 {
		t.Fatalf("without DESCRIBE: %+v", r)
	}
	setACLs(t, admin, allow(auth.Cluster, auth.ClusterName, auth.Describe), allow(auth.Cluster, auth.ClusterName, auth.Alter))
	if r := describeCluster(t, anon, 2, ask); r.ClusterAuthorizedOperations != 1<<8|1<<7 {
		t.Fatalf("with DESCRIBE and ALTER: operations %b", r.ClusterAuthorizedOperations)
	}
	if r := describeCluster(t, anon, 2, nil); r.ClusterAuthorizedOperations != -2147483648 {
		t.Fatalf("not asked: operations %d", r.ClusterAuthorizedOperations)
	}
}

// In a cluster, every broker names the same brokers and the lowest live one as
// controller; a stopped broker leaves the list, and comes back in it fenced when the
// fenced brokers are asked for (v2).
func TestDescribeClusterInACluster(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	ca, cb := directClient(t, a.Addr()), directClient(t, b.Addr())
	ids := func(r *kmsg.DescribeClusterResponse) (live, fenced []int32) {
		for _, br := range r.Brokers {
			if br.IsFenced {
				fenced = append(fenced, br.NodeID)
			} else {
				live = append(live, br.NodeID)
			}
		}
		return live, fenced
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, cl := range []*kgo.Client{ca, cb} {
		for {
			r := describeCluster(t, cl, 2, nil)
			if live, _ := ids(r); len(live) == 2 && r.ControllerID == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("both brokers never listed: %+v", r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		r := describeCluster(t, cb, 2, nil)
		if live, fenced := ids(r); len(live) == 1 && live[0] == 1 && len(fenced) == 0 && r.ControllerID == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker 0 never left: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := describeCluster(t, cb, 2, func(r *kmsg.DescribeClusterRequest) { r.IncludeFencedBrokers = true })
	if live, fenced := ids(r); len(live) != 1 || live[0] != 1 || len(fenced) != 1 || fenced[0] != 0 || r.ControllerID != 1 {
		t.Fatalf("with fenced brokers: %+v", r)
	}
}
