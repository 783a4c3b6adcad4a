package broker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// The ACL APIs through kadm: create, describe by filter (MATCH finds the prefixed and
// wildcard ACLs that apply to a name), delete by filter; refused for a principal without
// ALTER/DESCRIBE on the cluster, SECURITY_DISABLED without an authorizer. The SCRAM APIs'
// refusals and errors.
func TestACLAndSCRAMAPIs(t *testing.T) {
	b, admin := authzBroker(t)
	ctx := context.Background()
	adm := kadm.NewClient(admin)
	create := kadm.NewACLs().Allow("User:alice").Groups("orders-").ResourcePatternType(kadm.ACLPatternPrefixed).
		Operations(kadm.OpRead)
	wild := kadm.NewACLs().Deny("User:*").Topics("*").ResourcePatternType(kadm.ACLPatternLiteral).Operations(kadm.OpDelete)
	for _, bld := range []*kadm.ACLBuilder{create, wild} {
		res, err := adm.CreateACLs(ctx, bld)
		if err != nil || res[0].Err != nil {
			t.Fatalf("create: %v %+v", err, res)
		}
	}
	match := kadm.NewACLs().Groups("orders-eu").ResourcePatternType(kadm.ACLPatternMatch).
		Allow().Deny().AllowHosts().DenyHosts().Operations(kadm.OpAny)
	d, err := adm.DescribeACLs(ctx, match)
	if err != nil || d[0].Err != nil || len(d[0].Described) != 1 || d[0].Described[0].Name != "orders-" {
		t.Fatalf("describe MATCH orders-eu: %v %+v", err, d)
	}
	all := kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Allow().Deny().AllowHosts().DenyHosts().Operations(kadm.OpAny)
	if d, err := adm.DescribeACLs(ctx, all); err != nil || len(d[0].Described) != 2 {
		t.Fatalf("describe all: %v %+v", err, d)
	}
	del, err := adm.DeleteACLs(ctx, kadm.NewACLs().Topics("*").ResourcePatternType(kadm.ACLPatternLiteral).Deny().DenyHosts().Operations(kadm.OpAny))
	if err != nil || len(del[0].Deleted) != 1 || del[0].Deleted[0].Permission != kmsg.ACLPermissionTypeDeny {
		t.Fatalf("delete: %v %+v", err, del)
	}
	invalid := kmsg.NewPtrCreateACLsRequest()
	invalid.Creations = []kmsg.CreateACLsRequestCreation{{ResourceType: 4, ResourceName: "other", ResourcePatternType: 3,
		Principal: "User:x", Host: "*", Operation: 3, PermissionType: 3}}
	if r, err := invalid.RequestWith(ctx, admin); err != nil || r.Results[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("a CLUSTER ACL not named kafka-cluster: %v %+v", err, r)
	}

	// User:ANONYMOUS on the PLAINTEXT listener may not.
	anon, err := kgo.NewClient(kgo.SeedBrokers(b.ListenerAddr("PLAINTEXT")))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	aadm := kadm.NewClient(anon)
	if res, err := aadm.CreateACLs(ctx, create); err != nil || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("create as ANONYMOUS: %v %+v", err, res)
	}
	if res, err := aadm.DescribeACLs(ctx, all); err != nil || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("describe as ANONYMOUS: %v %+v", err, res)
	}
	if _, err := aadm.DescribeUserSCRAMs(ctx); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("describe users as ANONYMOUS: %v", err)
	}
	ar, err := aadm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "eve", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "x"}})
	if !errors.Is(err, kerr.ClusterAuthorizationFailed) && !errors.Is(ar["eve"].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alter users as ANONYMOUS: %v %+v", err, ar)
	}

	// The SCRAM APIs' own errors.
	alter := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	alter.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{{Name: "nobody", Mechanism: 2}}
	alter.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{
		{Name: "weak", Mechanism: 1, Iterations: 1000, Salt: []byte("salt"), SaltedPassword: make([]byte, 32)},
		{Name: "twice", Mechanism: 1, Iterations: 4096, Salt: []byte("salt"), SaltedPassword: make([]byte, 32)},
		{Name: "twice", Mechanism: 1, Iterations: 4096, Salt: []byte("salt"), SaltedPassword: make([]byte, 32)},
		{Name: "odd", Mechanism: 9, Iterations: 4096, Salt: []byte("salt"), SaltedPassword: make([]byte, 32)},
	}
	aresp, err := alter.RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int16{"nobody": kerr.ResourceNotFound.Code, "weak": kerr.UnacceptableCredential.Code,
		"twice": kerr.DuplicateResource.Code, "odd": kerr.UnsupportedSaslMechanism.Code}
	if len(aresp.Results) != len(want) {
		t.Fatalf("alter results: %+v", aresp.Results)
	}
	for _, r := range aresp.Results {
		if r.ErrorCode != want[r.User] {
			t.Errorf("alter %s: %v, want %v", r.User, kerr.ErrorForCode(r.ErrorCode), kerr.ErrorForCode(want[r.User]))
		}
	}
	dr, err := adm.DescribeUserSCRAMs(ctx, "admin", "nobody")
	if err != nil || dr["admin"].Err != nil || len(dr["admin"].CredInfos) != 1 || !errors.Is(dr["nobody"].Err, kerr.ResourceNotFound) {
		t.Fatalf("describe users: %v %+v", err, dr)
	}

	// Without an authorizer the ACL APIs are SECURITY_DISABLED.
	off := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(off.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if res, err := kadm.NewClient(cl).DescribeACLs(ctx, all); err != nil || !errors.Is(res[0].Err, kerr.SecurityDisabled) {
		t.Fatalf("describe without an authorizer: %v %+v", err, res)
	}
}
