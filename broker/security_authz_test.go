package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/actors/conn"
	"kaas/auth"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
	"kaas/storage"
)

// authzBroker is a broker with the simple authorizer: its PLAINTEXT listener serves
// User:ANONYMOUS, the principal under test, and its SASL_PLAINTEXT listener the super
// user admin, who changes ACLs with CreateAcls/DeleteAcls over the wire. admin's
// credential is in users.json before the start, as the chart's users Secret puts it.
func authzBroker(t *testing.T) (*broker.Broker, *kgo.Client) {
	t.Helper()
	c := brokertest.Config(t)
	c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1"}, {Name: "SASL_PLAINTEXT", Host: "127.0.0.1"}}
	c.Authorizer = "simple"
	c.SuperUsers = "User:admin"
	c.SecurityFilesPoll = 10 * time.Millisecond
	seedUser(t, c.DataDir, "admin", password)
	b := brokertest.StartWith(t, c)
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.ListenerAddr("SASL_PLAINTEXT")),
		kgo.SASL(scram.Auth{User: "admin", Pass: password}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return b, admin
}

func seedUser(t *testing.T, dataDir, user, pass string) {
	t.Helper()
	creds, err := auth.NewCredentials(auth.CredentialsConfig{Dir: filepath.Join(dataDir, "__cluster"), FS: storage.OSFS{}, Log: brokertest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := auth.NewCredential(auth.ScramSHA512, pass, auth.MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := creds.Alter([]auth.Change{{User: user, Mechanism: auth.ScramSHA512, Credential: &cr}}); err != nil {
		t.Fatal(err)
	}
}

// grant is one ACL for User:ANONYMOUS from any host.
type grant struct {
	t    auth.ResourceType
	pat  auth.PatternType
	name string
	op   auth.Operation
	perm auth.Permission
}

func allow(t auth.ResourceType, name string, op auth.Operation) grant {
	pat := auth.Literal
	if strings.HasSuffix(name, "*") && name != "*" {
		pat, name = auth.Prefixed, strings.TrimSuffix(name, "*")
	}
	return grant{t, pat, name, op, auth.Allow}
}

// setACLs replaces every ACL with gs, through DeleteAcls and CreateAcls as admin.
func setACLs(t *testing.T, admin *kgo.Client, gs ...grant) {
	t.Helper()
	ctx := context.Background()
	del := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType, f.Operation, f.PermissionType = auth.AnyResource, auth.AnyPattern, auth.AnyOperation, auth.AnyPermission
	del.Filters = append(del.Filters, f)
	dr, err := del.RequestWith(ctx, admin)
	if err != nil || dr.Results[0].ErrorCode != 0 {
		t.Fatalf("delete ACLs: %v %+v", err, dr)
	}
	if len(gs) == 0 {
		return
	}
	resp, err := kmsgCreate("User:ANONYMOUS", gs...).RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Results {
		if r.ErrorCode != 0 {
			t.Fatalf("create ACL: %v", kerr.ErrorForCode(r.ErrorCode))
		}
	}
}

// kmsgCreate is a CreateAcls of gs for principal from any host.
func kmsgCreate(principal string, gs ...grant) *kmsg.CreateACLsRequest {
	cr := kmsg.NewPtrCreateACLsRequest()
	for _, g := range gs {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = g.t, g.name, g.pat
		c.Principal, c.Host, c.Operation, c.PermissionType = principal, "*", g.op, g.perm
		cr.Creations = append(cr.Creations, c)
	}
	return cr
}

// groupCase is how the table test drives one group API: its request at a version for a
// group, the code that says whether it was refused, what it needs to be allowed.
type groupCase struct {
	req   func(v int16, group string) kmsg.Request
	code  func(v int16, r kmsg.Response) int16
	needs []grant
	// denied is the refusal's code (GROUP_AUTHORIZATION_FAILED for all but ListGroups,
	// whose refusal is leaving the group out: code 1 there means "listed").
	denied int16
	// deny is the DENY that refuses the API beside its ALLOWs (default: needs[0] as DENY).
	deny *grant
}

const topic = "authz-topic"

// topicID is topic's id once made: OffsetCommit and OffsetFetch v10 name it so.
var topicID [16]byte

var groupCases = map[int16]groupCase{
	8: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrOffsetCommitRequest()
			r.Group, r.Generation = g, -1
			t := kmsg.NewOffsetCommitRequestTopic()
			t.Topic, t.TopicID = topic, topicID
			p := kmsg.NewOffsetCommitRequestTopicPartition()
			p.Offset = 1
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		},
		code: func(_ int16, r kmsg.Response) int16 {
			return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
		},
		needs:  []grant{allow(auth.Group, "grp-*", auth.Read), allow(auth.Topic, topic, auth.Read)},
		denied: 30,
	},
	9: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrOffsetFetchRequest()
			if v >= 8 {
				rg := kmsg.NewOffsetFetchRequestGroup()
				rg.Group = g
				rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, TopicID: topicID, Partitions: []int32{0}}}
				r.Groups = append(r.Groups, rg)
			} else {
				r.Group = g
				r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: []int32{0}}}
			}
			return r
		},
		code: func(v int16, r kmsg.Response) int16 {
			resp := r.(*kmsg.OffsetFetchResponse)
			switch {
			case v >= 8:
				return resp.Groups[0].ErrorCode
			case v >= 2:
				return resp.ErrorCode
			}
			return resp.Topics[0].Partitions[0].ErrorCode
		},
		needs:  []grant{allow(auth.Group, "grp-*", auth.Describe), allow(auth.Topic, topic, auth.Describe)},
		denied: 30,
	},
	10: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrFindCoordinatorRequest()
			if v >= 4 {
				r.CoordinatorKeys = []string{g}
			} else {
				r.CoordinatorKey = g
			}
			return r
		},
		code: func(v int16, r kmsg.Response) int16 {
			resp := r.(*kmsg.FindCoordinatorResponse)
			if v >= 4 {
				return resp.Coordinators[0].ErrorCode
			}
			return resp.ErrorCode
		},
		// READ implies DESCRIBE: a consumer holding only READ finds its coordinator; a
		// DENY READ would not deny DESCRIBE, so the refusal is a DENY DESCRIBE.
		needs:  []grant{allow(auth.Group, "grp-*", auth.Read)},
		denied: 30,
		deny:   &grant{auth.Group, auth.Prefixed, "grp-", auth.Describe, auth.Deny},
	},
	11: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrJoinGroupRequest()
			r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = g, 100, 100, "consumer"
			r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{}}}
			return r
		},
		code:   func(_ int16, r kmsg.Response) int16 { return r.(*kmsg.JoinGroupResponse).ErrorCode },
		needs:  []grant{allow(auth.Group, "grp-*", auth.Read)},
		denied: 30,
	},
	12: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrHeartbeatRequest()
			r.Group, r.Generation, r.MemberID = g, 1, "m"
			return r
		},
		code:   func(_ int16, r kmsg.Response) int16 { return r.(*kmsg.HeartbeatResponse).ErrorCode },
		needs:  []grant{allow(auth.Group, "grp-*", auth.Read)},
		denied: 30,
	},
	13: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrLeaveGroupRequest()
			r.Group, r.MemberID = g, "m"
			r.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "m"}}
			return r
		},
		code:   func(_ int16, r kmsg.Response) int16 { return r.(*kmsg.LeaveGroupResponse).ErrorCode },
		needs:  []grant{allow(auth.Group, "grp-*", auth.Read)},
		denied: 30,
	},
	14: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrSyncGroupRequest()
			r.Group, r.Generation, r.MemberID = g, 1, "m"
			r.ProtocolType, r.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
			return r
		},
		code:   func(_ int16, r kmsg.Response) int16 { return r.(*kmsg.SyncGroupResponse).ErrorCode },
		needs:  []grant{allow(auth.Group, "grp-*", auth.Read)},
		denied: 30,
	},
	15: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.Groups = []string{g}
			return r
		},
		code:   func(_ int16, r kmsg.Response) int16 { return r.(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode },
		needs:  []grant{allow(auth.Group, "grp-*", auth.Describe)},
		denied: 30,
	},
	16: {
		req: func(v int16, g string) kmsg.Request { return kmsg.NewPtrListGroupsRequest() },
		code: func(_ int16, r kmsg.Response) int16 {
			for _, g := range r.(*kmsg.ListGroupsResponse).Groups {
				if g.Group == "grp-exists" {
					return 1
				}
			}
			return 0
		},
		needs:  []grant{allow(auth.Cluster, auth.ClusterName, auth.Describe)},
		denied: 0,
	},
	68: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			r.Group, r.MemberID, r.MemberEpoch, r.RebalanceTimeoutMillis = g, "m-"+g, 0, 1000
			r.SubscribedTopicNames, r.Topics = []string{topic}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			return r
		},
		code:   func(_ int16, r kmsg.Response) int16 { return r.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode },
		needs:  []grant{allow(auth.Group, "grp-*", auth.Read), allow(auth.Topic, topic, auth.Describe)},
		denied: 30,
	},
	69: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrConsumerGroupDescribeRequest()
			r.Groups = []string{g}
			return r
		},
		code: func(_ int16, r kmsg.Response) int16 {
			return r.(*kmsg.ConsumerGroupDescribeResponse).Groups[0].ErrorCode
		},
		// The heartbeat's case made grp-allowed a group assigned the topic: describing it
		// needs the topic's DESCRIBE too.
		needs:  []grant{allow(auth.Group, "grp-*", auth.Describe), allow(auth.Topic, topic, auth.Describe)},
		denied: 30,
	},
	42: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrDeleteGroupsRequest()
			r.Groups = []string{g}
			return r
		},
		code:   func(_ int16, r kmsg.Response) int16 { return r.(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode },
		needs:  []grant{allow(auth.Group, "grp-*", auth.Delete)},
		denied: 30,
	},
	47: {
		req: func(v int16, g string) kmsg.Request {
			r := kmsg.NewPtrOffsetDeleteRequest()
			r.Group = g
			r.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
			return r
		},
		code:   func(_ int16, r kmsg.Response) int16 { return r.(*kmsg.OffsetDeleteResponse).ErrorCode },
		needs:  []grant{allow(auth.Group, "grp-*", auth.Delete), allow(auth.Topic, topic, auth.Read)},
		denied: 30,
	},
}

// roundtrip sends req at version v over a fresh connection and returns the response and
// its encoding.
func roundtrip(t *testing.T, addr string, req kmsg.Request, v int16) (kmsg.Response, []byte) {
	t.Helper()
	req.SetVersion(v)
	r := brokertest.Dial(t, addr)
	defer r.C.Close()
	r.Send(req, 7)
	b, err := r.ReadFrame(10 * time.Second)
	if err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), v, err)
	}
	resp := req.ResponseKind()
	resp.SetVersion(v)
	if _, err := brokertest.Decode(b, resp); err != nil {
		t.Fatalf("%s v%d: decode: %v", kmsg.NameForKey(req.Key()), v, err)
	}
	return resp, b
}

// versions is the lowest and highest version the broker advertises for key.
func versions(t *testing.T, addr string, key int16) (int16, int16) {
	resp, _ := roundtrip(t, addr, kmsg.NewPtrApiVersionsRequest(), 0)
	for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
		if k.ApiKey == key {
			return k.MinVersion, k.MaxVersion
		}
	}
	t.Fatalf("key %d not advertised", key)
	return 0, 0
}

// Every group row of the authorization table (AuthzTable, which docs/security.md shows),
// at the API's oldest and newest version: allowed with the ACLs it needs, refused without
// them, refused when a DENY sits beside the ALLOW; and a refused principal gets the same
// bytes whether or not the group exists.
func TestAuthzTableGroupAPIs(t *testing.T) {
	b, admin := authzBroker(t)
	addr := b.ListenerAddr("PLAINTEXT")
	ctx := context.Background()
	adm := kadm.NewClient(admin)
	td, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
	if err != nil {
		t.Fatal(err)
	}
	topicID = td.ID
	off := kadm.Offsets{}
	off.Add(kadm.Offset{Topic: topic, Partition: 0, At: 5, LeaderEpoch: -1})
	if r, err := adm.CommitOffsets(ctx, "grp-exists", off); err != nil || r.Error() != nil {
		t.Fatalf("commit as admin: %v %v", err, r.Error())
	}
	covered := 0
	for _, row := range conn.AuthzTable() {
		if !strings.HasPrefix(row.Checks, "GROUP") && row.Key != 16 && row.Key != 10 {
			continue
		}
		gc, ok := groupCases[row.Key]
		if !ok {
			t.Errorf("the table's row %s (key %d) has no case here", row.API, row.Key)
			continue
		}
		covered++
		lo, hi := versions(t, addr, row.Key)
		for _, v := range []int16{lo, hi} {
			t.Run(fmt.Sprintf("%s/v%d", row.API, v), func(t *testing.T) {
				setACLs(t, admin, gc.needs...)
				if code := gc.code(v, first(roundtrip(t, addr, gc.req(v, "grp-allowed"), v))); code == gc.denied || code == 29 {
					t.Fatalf("allowed: code %d (%v)", code, kerr.ErrorForCode(code))
				}
				if row.Key == 16 {
					if code := gc.code(v, first(roundtrip(t, addr, gc.req(v, ""), v))); code != 1 {
						t.Fatal("allowed ListGroups does not list grp-exists")
					}
				}
				deny := append([]grant{}, gc.needs...)
				d := grant{gc.needs[0].t, gc.needs[0].pat, gc.needs[0].name, gc.needs[0].op, auth.Deny}
				if gc.deny != nil {
					d = *gc.deny
				}
				deny = append(deny, d)
				for name, acls := range map[string][]grant{"no ACL": nil, "DENY beside ALLOW": deny} {
					setACLs(t, admin, acls...)
					respE, rawE := roundtrip(t, addr, gc.req(v, "grp-exists"), v)
					respA, rawA := roundtrip(t, addr, gc.req(v, "grp-absent"), v)
					if code := gc.code(v, respE); code != gc.denied {
						t.Fatalf("%s: code %d (%v), want %d", name, code, kerr.ErrorForCode(code), gc.denied)
					}
					if gc.code(v, respA) != gc.denied {
						t.Fatalf("%s: the absent group: code %d", name, gc.code(v, respA))
					}
					if !bytes.Equal(rawE, bytes.ReplaceAll(rawA, []byte("grp-absent"), []byte("grp-exists"))) {
						t.Fatalf("%s: a denied principal can tell an existing group from an absent one:\n%x\n%x", name, rawE, rawA)
					}
				}
			})
		}
	}
	if covered != len(groupCases) {
		t.Errorf("%d group rows in the table, %d cases here", covered, len(groupCases))
	}
}

func first(r kmsg.Response, _ []byte) kmsg.Response { return r }

// The topic parts of the group APIs: an unauthorized topic in OffsetCommit gets 29 and
// is not committed, in OffsetFetch it gets 29 with offset -1 when named and is left out
// of the all-topics form; DescribeGroups reports the operations the ACLs give.
func TestAuthzGroupTopicsAndOperations(t *testing.T) {
	b, admin := authzBroker(t)
	addr := b.ListenerAddr("PLAINTEXT")
	ctx := context.Background()
	adm := kadm.NewClient(admin)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "open-topic"); err != nil {
		t.Fatal(err)
	}
	off := kadm.Offsets{}
	off.Add(kadm.Offset{Topic: topic, Partition: 0, At: 5, LeaderEpoch: -1})
	off.Add(kadm.Offset{Topic: "open-topic", Partition: 0, At: 7, LeaderEpoch: -1})
	if r, err := adm.CommitOffsets(ctx, "grp-g", off); err != nil || r.Error() != nil {
		t.Fatalf("commit as admin: %v %v", err, r.Error())
	}
	setACLs(t, admin, allow(auth.Group, "grp-g", auth.Read), allow(auth.Topic, "open-topic", auth.Read))

	commit := groupCases[8].req(9, "grp-g").(*kmsg.OffsetCommitRequest)
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "open-topic"
	ot.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 8}}
	commit.Topics = append(commit.Topics, ot)
	resp, _ := roundtrip(t, addr, commit, 9)
	cr := resp.(*kmsg.OffsetCommitResponse)
	if len(cr.Topics) != 2 || cr.Topics[0].Topic != topic || cr.Topics[0].Partitions[0].ErrorCode != 29 ||
		cr.Topics[1].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit: %+v", cr.Topics)
	}
	got, err := adm.FetchOffsets(ctx, "grp-g")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := got.Lookup(topic, 0); o.At != 5 {
		t.Fatalf("the unauthorized topic's offset moved: %d", o.At)
	}
	if o, _ := got.Lookup("open-topic", 0); o.At != 8 {
		t.Fatalf("the authorized topic's offset: %d", o.At)
	}

	for _, v := range []int16{1, 7, 9} {
		named := groupCases[9].req(v, "grp-g")
		resp, _ := roundtrip(t, addr, named, v)
		fr := resp.(*kmsg.OffsetFetchResponse)
		var p kmsg.OffsetFetchResponseGroupTopicPartition
		if v >= 8 {
			p = fr.Groups[0].Topics[0].Partitions[0]
		} else {
			q := fr.Topics[0].Partitions[0]
			p.ErrorCode, p.Offset = q.ErrorCode, q.Offset
		}
		if p.ErrorCode != 29 || p.Offset != -1 {
			t.Errorf("v%d named unauthorized topic: code %d offset %d", v, p.ErrorCode, p.Offset)
		}
		if v == 1 {
			continue
		}
		all := kmsg.NewPtrOffsetFetchRequest()
		if v >= 8 {
			all.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "grp-g"}}
		} else {
			all.Group = "grp-g"
		}
		resp, _ = roundtrip(t, addr, all, v)
		fr = resp.(*kmsg.OffsetFetchResponse)
		var names []string
		if v >= 8 {
			for _, t := range fr.Groups[0].Topics {
				names = append(names, t.Topic)
			}
		} else {
			for _, t := range fr.Topics {
				names = append(names, t.Topic)
			}
		}
		if strings.Join(names, ",") != "open-topic" {
			t.Errorf("v%d all topics: %v, want only open-topic", v, names)
		}
	}

	d := kmsg.NewPtrDescribeGroupsRequest()
	d.Groups, d.IncludeAuthorizedOperations = []string{"grp-g"}, true
	resp, _ = roundtrip(t, addr, d, 5)
	g := resp.(*kmsg.DescribeGroupsResponse).Groups[0]
	if want := int32(1<<auth.Read | 1<<auth.Describe); g.ErrorCode != 0 || g.AuthorizedOperations != want {
		t.Errorf("authorized_operations %d (code %d), want READ|DESCRIBE %d", g.AuthorizedOperations, g.ErrorCode, want)
	}
}

// An ACL file changed on disk by another broker or an operator is taken up without a
// restart; a file that no longer parses leaves the ACLs in force.
func TestAuthzACLFileEditedOnDisk(t *testing.T) {
	b, admin := authzBroker(t)
	addr := b.ListenerAddr("PLAINTEXT")
	a := b.Env().Authorizer
	find := groupCases[10]
	code := func() int16 { return find.code(4, first(roundtrip(t, addr, find.req(4, "grp-x"), 4))) }
	if code() != 30 {
		t.Fatal("no ACL yet: denied")
	}
	path := filepath.Join(b.Env().Config.DataDir, "__cluster", auth.ACLsFile)
	write := func(body []byte) {
		before := a.Version()
		tmp := path + ".edit"
		if err := os.WriteFile(tmp, body, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, 5*time.Millisecond, testwait.Cond("the rewritten ACL file read", func() bool { return a.Version() != before }))
	}
	acl := auth.ACL{ResourceType: auth.Group, ResourceName: "grp-", PatternType: auth.Prefixed, Principal: "User:ANONYMOUS",
		Host: "*", Operation: auth.Describe, Permission: auth.Allow}
	body, _ := json.Marshal(map[string]any{"version": 1, "acls": []auth.ACL{acl}})
	write(body)
	if code() != 0 {
		t.Fatal("the ACL written on disk is not in force")
	}
	// Broken: refused, the ACL stays. Polling notices the new version without taking it.
	if err := os.WriteFile(path, []byte(`{"version":1,"acls":[{"resource_type":"GROUP"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code() != 0 {
		t.Fatal("a broken file dropped the ACLs in force")
	}
	body, _ = json.Marshal(map[string]any{"version": 1, "acls": []auth.ACL{}})
	write(body)
	if code() != 30 {
		t.Fatal("the emptied file is not in force")
	}
	_ = admin
}

// The data path: Produce needs WRITE, Fetch READ, Metadata DESCRIBE (an unauthorized topic
// is 29 when named and left out of the all-topics list), CreateTopics CREATE, DeleteTopics
// DELETE; each denial is counted by API and resource type.
func TestAuthzDataPath(t *testing.T) {
	b, admin := authzBroker(t)
	addr := b.ListenerAddr("PLAINTEXT")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(admin)
	for _, name := range []string{"open", "closed"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	setACLs(t, admin, allow(auth.Topic, "open", auth.Write), allow(auth.Topic, "open", auth.Read))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.RecordRetries(1),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"open": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "open", Value: []byte("ok")}).FirstErr(); err != nil {
		t.Fatalf("produce to open: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "closed", Value: []byte("no")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce to closed: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if fs := cl.PollRecords(ctx, 1); fs.NumRecords() != 1 || fs.Err0() != nil {
		t.Fatalf("fetch open: %d records, %v", fs.NumRecords(), fs.Err0())
	}

	// Fetch of both topics in one request: open answers, closed is 29.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxWaitMillis, fetch.MaxBytes = 0, 1<<20
	for _, name := range []string{"closed", "open"} {
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = name
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		fetch.Topics = append(fetch.Topics, ft)
	}
	resp, _ := roundtrip(t, addr, fetch, 12)
	codes := map[string]int16{}
	for _, rt := range resp.(*kmsg.FetchResponse).Topics {
		codes[rt.Topic] = rt.Partitions[0].ErrorCode
	}
	if codes["open"] != 0 || codes["closed"] != 29 {
		t.Fatalf("fetch codes %v", codes)
	}

	md := kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("closed")}, {Topic: kmsg.StringPtr("open")}}
	resp, _ = roundtrip(t, addr, md, 12)
	for _, mt := range resp.(*kmsg.MetadataResponse).Topics {
		want := int16(0)
		if *mt.Topic == "closed" {
			want = 29
		}
		if mt.ErrorCode != want || (want == 29 && len(mt.Partitions) != 0) {
			t.Errorf("metadata %s: code %d, %d partitions", *mt.Topic, mt.ErrorCode, len(mt.Partitions))
		}
	}
	// authorized_operations from the ACLs: WRITE and READ imply DESCRIBE.
	md = kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("open")}}
	md.IncludeTopicAuthorizedOperations, md.IncludeClusterAuthorizedOperations = true, true
	resp, _ = roundtrip(t, addr, md, 10)
	mr := resp.(*kmsg.MetadataResponse)
	if want := int32(1<<auth.Read | 1<<auth.Write | 1<<auth.Describe); mr.Topics[0].AuthorizedOperations != want || mr.AuthorizedOperations != 0 {
		t.Errorf("authorized_operations: topic %b (want %b), cluster %b (want 0)", mr.Topics[0].AuthorizedOperations, want, mr.AuthorizedOperations)
	}
	for _, v := range []int16{0, 12} {
		all := kmsg.NewPtrMetadataRequest()
		if v > 0 {
			all.Topics = nil
		}
		resp, _ = roundtrip(t, addr, all, v)
		var names []string
		for _, mt := range resp.(*kmsg.MetadataResponse).Topics {
			names = append(names, *mt.Topic)
		}
		if len(names) != 1 || names[0] != "open" {
			t.Errorf("metadata v%d all topics: %v, want [open]", v, names)
		}
	}
	// Auto-creation needs CREATE: the topic is refused and not made.
	md = kmsg.NewPtrMetadataRequest()
	md.AllowAutoTopicCreation = true
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("new-one")}}
	setACLs(t, admin, allow(auth.Topic, "*", auth.Describe))
	resp, _ = roundtrip(t, addr, md, 9)
	if code := resp.(*kmsg.MetadataResponse).Topics[0].ErrorCode; code != 29 {
		t.Fatalf("auto-creation without CREATE: code %d", code)
	}

	anon := kadm.NewClient(cl)
	if r, err := anon.CreateTopic(ctx, 1, 1, nil, "made"); err == nil && !errors.Is(r.Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("create without CREATE: %v", r.Err)
	}
	if r, err := anon.DeleteTopics(ctx, "open"); err != nil || !errors.Is(r["open"].Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("delete without DELETE: %v %+v", err, r)
	}
	setACLs(t, admin, allow(auth.Topic, "made", auth.Create), allow(auth.Topic, "open", auth.Delete))
	if r, err := anon.CreateTopic(ctx, 1, 1, nil, "made"); err != nil || r.Err != nil {
		t.Fatalf("create with CREATE: %v %v", err, r.Err)
	}
	if r, err := anon.DeleteTopics(ctx, "open"); err != nil || r["open"].Err != nil {
		t.Fatalf("delete with DELETE: %v %+v", err, r)
	}

	// A Produce straight to the closed topic (a client that skips Metadata).
	pr := kmsg.NewPtrProduceRequest()
	pr.Acks, pr.TimeoutMillis = 1, 1000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "closed"
	pt.Partitions = []kmsg.ProduceRequestTopicPartition{kmsg.NewProduceRequestTopicPartition()}
	pr.Topics = append(pr.Topics, pt)
	resp, _ = roundtrip(t, addr, pr, 9)
	if rt := resp.(*kmsg.ProduceResponse).Topics; len(rt) != 1 || rt[0].Partitions[0].ErrorCode != 29 {
		t.Fatalf("produce to closed: %+v", rt)
	}

	met := b.Metrics()
	if n := testutil.ToFloat64(met.AuthorizationDenied.WithLabelValues("Produce", "topic")); n != 1 {
		t.Errorf("Produce denials counted: %v", n)
	}
	if n := testutil.ToFloat64(met.AuthorizationDenied.WithLabelValues("Fetch", "topic")); n != 1 {
		t.Errorf("Fetch denials counted: %v, want 1", n)
	}
}

// ConsumerGroupHeartbeat: a subscribed topic name the principal may not describe is
// TOPIC_AUTHORIZATION_FAILED; a regular expression resolves only to the topics it may
// describe (Apache).
func TestAuthzConsumerGroupTopics(t *testing.T) {
	b, admin := authzBroker(t)
	addr := b.ListenerAddr("PLAINTEXT")
	ctx := context.Background()
	if _, err := kadm.NewClient(admin).CreateTopics(ctx, 1, 1, nil, "seen-a", "seen-b", "hidden"); err != nil {
		t.Fatal(err)
	}
	setACLs(t, admin, allow(auth.Group, "grp-*", auth.Read), allow(auth.Topic, "seen-*", auth.Describe))
	hb := func(member string, names []string, regex *string) *kmsg.ConsumerGroupHeartbeatResponse {
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Group, r.MemberID, r.RebalanceTimeoutMillis = "grp-regex", member, 1000
		r.SubscribedTopicNames, r.SubscribedTopicRegex, r.Topics = names, regex, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		resp, _ := roundtrip(t, addr, r, 1)
		return resp.(*kmsg.ConsumerGroupHeartbeatResponse)
	}
	if got := hb("m1", []string{"hidden"}, nil).ErrorCode; got != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("named hidden topic: code %d", got)
	}
	r := hb("m2", nil, kmsg.StringPtr(".*"))
	if r.ErrorCode != 0 || r.Assignment == nil {
		t.Fatalf("regex join: %+v", r)
	}
	if n := len(r.Assignment.Topics); n != 2 {
		t.Fatalf("regex .* resolved to %d topics, want the two seen-* ones", n)
	}
	describe := func() kmsg.ConsumerGroupDescribeResponseGroup {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{"grp-regex"}
		resp, _ := roundtrip(t, addr, req, 1)
		return resp.(*kmsg.ConsumerGroupDescribeResponse).Groups[0]
	}
	setACLs(t, admin, allow(auth.Group, "grp-*", auth.Read), allow(auth.Group, "grp-*", auth.Describe), allow(auth.Topic, "seen-*", auth.Describe))
	if g := describe(); g.ErrorCode != 0 || len(g.Members) != 1 {
		t.Fatalf("describe with the topics describable: %+v", g)
	}
	// The assignment names seen-a and seen-b: without DESCRIBE on seen-b the group is
	// TOPIC_AUTHORIZATION_FAILED, its members left out (Apache).
	setACLs(t, admin, allow(auth.Group, "grp-*", auth.Read), allow(auth.Group, "grp-*", auth.Describe), allow(auth.Topic, "seen-a", auth.Describe))
	if g := describe(); g.ErrorCode != kerr.TopicAuthorizationFailed.Code || len(g.Members) != 0 {
		t.Fatalf("describe with seen-b hidden: %+v", g)
	}
}
