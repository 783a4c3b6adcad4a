package auth

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"kaas/storage"
)

func acl(t ResourceType, pat PatternType, name, principal, host string, op Operation, perm Permission) ACL {
	return ACL{ResourceType: t, ResourceName: name, PatternType: pat, Principal: principal, Host: host, Operation: op, Permission: perm}
}

func TestDecide(t *testing.T) {
	alice := User("alice")
	rules := []ACL{
		acl(Group, Literal, "g", "User:alice", "*", Read, Allow),
		acl(Group, Prefixed, "team-", "User:alice", "*", Delete, Allow),
		acl(Group, Literal, "team-secret", "User:alice", "*", All, Deny),
		acl(Topic, Literal, "*", "User:*", "*", Describe, Allow),
		acl(Topic, Literal, "t", "User:alice", "10.0.0.1", Write, Allow),
		acl(Topic, Literal, "r", "User:alice", "*", Read, Deny),
		acl(Topic, Literal, "r", "User:alice", "*", Describe, Allow),
		acl(Cluster, Literal, ClusterName, "User:alice", "*", AlterConfigs, Allow),
	}
	r := NewRules(rules)
	cases := []struct {
		name    string
		p       Principal
		host    string
		op      Operation
		rt      ResourceType
		res     string
		none    bool
		allowed bool
	}{
		{"literal allow", alice, "1.2.3.4", Read, Group, "g", false, true},
		{"read implies describe", alice, "1.2.3.4", Describe, Group, "g", false, true},
		{"read does not imply delete", alice, "1.2.3.4", Delete, Group, "g", false, false},
		{"other principal", User("bob"), "1.2.3.4", Read, Group, "g", false, false},
		{"prefixed", alice, "1.2.3.4", Delete, Group, "team-a", false, true},
		{"delete implies describe", alice, "1.2.3.4", Describe, Group, "team-a", false, true},
		{"deny all wins over prefixed allow", alice, "1.2.3.4", Delete, Group, "team-secret", false, false},
		{"deny all denies describe", alice, "1.2.3.4", Describe, Group, "team-secret", false, false},
		{"prefix does not match shorter", alice, "1.2.3.4", Delete, Group, "team", false, false},
		{"User:* and literal *", User("bob"), "9.9.9.9", Describe, Topic, "anything", false, true},
		{"host matches", alice, "10.0.0.1", Write, Topic, "t", false, true},
		{"host does not match", alice, "10.0.0.2", Write, Topic, "t", false, false},
		{"deny read leaves describe", alice, "1.2.3.4", Describe, Topic, "r", false, true},
		{"deny read", alice, "1.2.3.4", Read, Topic, "r", false, false},
		{"alter_configs implies describe_configs", alice, "1.2.3.4", DescribeConfigs, Cluster, ClusterName, false, true},
		{"no acl, default deny", alice, "1.2.3.4", Read, TransactionalID, "x", false, false},
		{"no acl, allow everyone", alice, "1.2.3.4", Read, TransactionalID, "x", true, true},
		{"an acl for another principal stops allow-everyone", User("bob"), "1.2.3.4", Read, Group, "g", true, false},
	}
	for _, c := range cases {
		if got := r.Decide(c.p, c.host, c.op, c.rt, c.res, c.none); got != c.allowed {
			t.Errorf("%s: Decide = %v, want %v", c.name, got, c.allowed)
		}
	}
	if !r.AnyAllowed(alice, "10.0.0.1", Write, Topic) || r.AnyAllowed(User("bob"), "10.0.0.1", Write, Topic) {
		t.Errorf("AnyAllowed: alice may write some topic from 10.0.0.1, bob none")
	}
}

func TestAuthorizerSuperUserAndNil(t *testing.T) {
	var off *Authorizer
	if !off.Authorize(User("x"), "h", Delete, Group, "g") {
		t.Fatal("a nil authorizer allows everything")
	}
	a, err := NewAuthorizer(AuthorizerConfig{Dir: t.TempDir(), FS: storage.OSFS{}, SuperUsers: []Principal{User("admin")}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Authorize(User("admin"), "h", Delete, Group, "g") || a.Authorize(User("x"), "h", Describe, Group, "g") {
		t.Fatal("super user allowed, anyone else denied with no ACLs")
	}
}

func TestFilter(t *testing.T) {
	name := "team-a"
	lit := acl(Group, Literal, "team-a", "User:alice", "*", Read, Allow)
	wild := acl(Group, Literal, "*", "User:alice", "*", Read, Allow)
	pre := acl(Group, Prefixed, "team-", "User:alice", "*", Read, Allow)
	other := acl(Group, Literal, "team-b", "User:alice", "*", Read, Allow)
	match := Filter{ResourceType: Group, ResourceName: &name, PatternType: Match, Operation: AnyOperation, Permission: AnyPermission}
	for _, c := range []struct {
		a    ACL
		want bool
	}{{lit, true}, {wild, true}, {pre, true}, {other, false}} {
		if got := match.Matches(c.a); got != c.want {
			t.Errorf("MATCH %s: %v, want %v", c.a, got, c.want)
		}
	}
	exact := Filter{ResourceType: AnyResource, ResourceName: &name, PatternType: AnyPattern, Operation: AnyOperation, Permission: AnyPermission}
	if !exact.Matches(lit) || exact.Matches(pre) || exact.Matches(wild) {
		t.Errorf("ANY with a name matches that exact name only")
	}
	prefixed := Filter{ResourceType: Group, PatternType: Prefixed, Operation: Read, Permission: Allow}
	if !prefixed.Matches(pre) || prefixed.Matches(lit) {
		t.Errorf("PREFIXED matches prefixed ACLs only")
	}
}

func TestACLFileRoundTripAndReload(t *testing.T) {
	dir := t.TempDir()
	cfg := AuthorizerConfig{Dir: dir, FS: storage.OSFS{}, Log: zerolog.Nop()}
	a, err := NewAuthorizer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewAuthorizer(cfg) // a second broker on the same volume
	if err != nil {
		t.Fatal(err)
	}
	g := acl(Group, Literal, "g", "User:alice", "*", Read, Allow)
	if err := a.Create([]ACL{g, g}); err != nil {
		t.Fatal(err)
	}
	if !a.Authorize(User("alice"), "h", Read, Group, "g") {
		t.Fatal("the broker that wrote sees its ACL at once")
	}
	if b.Authorize(User("alice"), "h", Read, Group, "g") {
		t.Fatal("the other broker has not polled yet")
	}
	b.Poll()
	if !b.Authorize(User("alice"), "h", Read, Group, "g") {
		t.Fatal("the other broker took up the change")
	}
	// An operator's edit: a broken file keeps the rules in force.
	path := filepath.Join(dir, ACLsFile)
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := b.Version()
	b.Poll()
	if b.Version() != before || !b.Authorize(User("alice"), "h", Read, Group, "g") {
		t.Fatal("a broken file is refused and the old rules stay")
	}
	if err := os.WriteFile(path, []byte(`{"version":1,"acls":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Poll()
	if b.Authorize(User("alice"), "h", Read, Group, "g") {
		t.Fatal("the edited file (no ACLs) is in force")
	}
	deleted, err := a.Delete([]Filter{{ResourceType: AnyResource, PatternType: AnyPattern, Operation: AnyOperation, Permission: AnyPermission}})
	if err != nil || len(deleted[0]) != 0 {
		t.Fatalf("delete on the edited file: %v %v", deleted, err)
	}
}
