package auth

import (
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The ACL vocabulary is Apache's, with kmsg's numbering (the wire's).
type (
	ResourceType = kmsg.ACLResourceType
	PatternType  = kmsg.ACLResourcePatternType
	Operation    = kmsg.ACLOperation
	Permission   = kmsg.ACLPermissionType
)

// The values used here, by name.
const (
	AnyResource     ResourceType = 1
	Topic           ResourceType = 2
	Group           ResourceType = 3
	Cluster         ResourceType = 4
	TransactionalID ResourceType = 5

	AnyPattern PatternType = 1
	Match      PatternType = 2
	Literal    PatternType = 3
	Prefixed   PatternType = 4

	AnyOperation    Operation = 1
	All             Operation = 2
	Read            Operation = 3
	Write           Operation = 4
	Create          Operation = 5
	Delete          Operation = 6
	Alter           Operation = 7
	Describe        Operation = 8
	ClusterAction   Operation = 9
	DescribeConfigs Operation = 10
	AlterConfigs    Operation = 11
	IdempotentWrite Operation = 12

	AnyPermission Permission = 1
	Deny          Permission = 2
	Allow         Permission = 3
)

// ClusterName is the one name of the CLUSTER resource.
const ClusterName = "kafka-cluster"

// Wildcard is the literal resource name, principal name and host that match any.
const Wildcard = "*"

// ACL is one access control entry bound to a resource pattern (Apache's AclBinding).
type ACL struct {
	ResourceType ResourceType
	ResourceName string
	PatternType  PatternType
	Principal    string // User:alice, or User:* for any user
	Host         string // an address, or * for any
	Operation    Operation
	Permission   Permission
}

func (a ACL) String() string {
	return fmt.Sprintf("%s %s:%s:%s %s %s from %s", a.Permission, a.ResourceType, a.PatternType, a.ResourceName,
		a.Operation, a.Principal, a.Host)
}

// aclJSON is an ACL as acls.json holds it: every enum by its Apache name, so an operator
// can read and edit the file.
type aclJSON struct {
	ResourceType string `json:"resource_type"`
	ResourceName string `json:"resource_name"`
	PatternType  string `json:"pattern_type"`
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
}

func (a ACL) MarshalJSON() ([]byte, error) {
	return json.Marshal(aclJSON{a.ResourceType.String(), a.ResourceName, a.PatternType.String(), a.Principal,
		a.Host, a.Operation.String(), a.Permission.String()})
}

func (a *ACL) UnmarshalJSON(b []byte) error {
	var j aclJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var err error
	var x ACL
	if x.ResourceType, err = kmsg.ParseACLResourceType(j.ResourceType); err != nil {
		return err
	}
	if x.PatternType, err = kmsg.ParseACLResourcePatternType(j.PatternType); err != nil {
		return err
	}
	if x.Operation, err = kmsg.ParseACLOperation(j.Operation); err != nil {
		return err
	}
	if x.Permission, err = kmsg.ParseACLPermissionType(j.Permission); err != nil {
		return err
	}
	x.ResourceName, x.Principal, x.Host = j.ResourceName, j.Principal, j.Host
	if err := x.Validate(); err != nil {
		return err
	}
	*a = x
	return nil
}

// Validate refuses what CreateAcls refuses with INVALID_REQUEST: a resource type, pattern
// type, operation or permission that is not a concrete one, a CLUSTER resource not named
// kafka-cluster, an empty name or host, a principal that is not User:name (ParsePrincipal).
func (a ACL) Validate() error {
	switch a.ResourceType {
	case Topic, Group, Cluster, TransactionalID:
	default:
		return fmt.Errorf("resource type %s is not one of TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID", a.ResourceType)
	}
	switch a.PatternType {
	case Literal, Prefixed:
	default:
		return fmt.Errorf("pattern type %s is not LITERAL or PREFIXED", a.PatternType)
	}
	if a.ResourceName == "" {
		return fmt.Errorf("empty resource name")
	}
	if a.ResourceType == Cluster && (a.ResourceName != ClusterName || a.PatternType != Literal) {
		return fmt.Errorf("the CLUSTER resource is the literal %s", ClusterName)
	}
	if _, err := ParsePrincipal(a.Principal); err != nil {
		return err
	}
	if a.Host == "" {
		return fmt.Errorf("empty host (* is any)")
	}
	if a.Host != Wildcard && net.ParseIP(a.Host) == nil {
		return fmt.Errorf("host %q is not an address or *", a.Host)
	}
	if a.Operation < All || a.Operation > IdempotentWrite {
		return fmt.Errorf("operation %s is not a concrete operation", a.Operation)
	}
	if a.Permission != Allow && a.Permission != Deny {
		return fmt.Errorf("permission %s is not ALLOW or DENY", a.Permission)
	}
	return nil
}

// matchesResource says whether the ACL's pattern covers the resource (t, name).
func (a *ACL) matchesResource(t ResourceType, name string) bool {
	if a.ResourceType != t {
		return false
	}
	switch a.PatternType {
	case Literal:
		return a.ResourceName == name || a.ResourceName == Wildcard
	case Prefixed:
		return strings.HasPrefix(name, a.ResourceName)
	}
	return false
}

func (a *ACL) matchesPrincipal(p string) bool {
	return a.Principal == p || a.Principal == "User:"+Wildcard
}

func (a *ACL) matchesHost(host string) bool { return a.Host == Wildcard || a.Host == host }

// grants says whether an ALLOW of the ACL's operation allows op: ALL allows every
// operation, and READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies
// DESCRIBE_CONFIGS (Apache's StandardAuthorizerData.IMPLIES_DESCRIBE).
func (a *ACL) grants(op Operation) bool {
	switch {
	case a.Operation == All || a.Operation == op:
		return true
	case op == Describe:
		return a.Operation == Read || a.Operation == Write || a.Operation == Delete || a.Operation == Alter
	case op == DescribeConfigs:
		return a.Operation == AlterConfigs
	}
	return false
}

// denies says whether a DENY of the ACL's operation denies op: only the operation itself
// and ALL; a DENY READ leaves DESCRIBE alone.
func (a *ACL) denies(op Operation) bool { return a.Operation == All || a.Operation == op }

// Rules are one version of the cluster's ACLs, indexed by resource type. They are never
// changed once made; a change makes new Rules.
type Rules struct {
	acls   []ACL
	byType map[ResourceType][]*ACL
}

// NewRules indexes acls (duplicates are kept once).
func NewRules(acls []ACL) *Rules {
	r := &Rules{byType: map[ResourceType][]*ACL{}}
	seen := map[ACL]bool{}
	for _, a := range acls {
		if seen[a] {
			continue
		}
		seen[a] = true
		r.acls = append(r.acls, a)
	}
	sortACLs(r.acls)
	for i := range r.acls {
		a := &r.acls[i]
		r.byType[a.ResourceType] = append(r.byType[a.ResourceType], a)
	}
	return r
}

// ACLs is every ACL, in a stable order.
func (r *Rules) ACLs() []ACL { return append([]ACL(nil), r.acls...) }

func sortACLs(acls []ACL) {
	sort.Slice(acls, func(i, j int) bool {
		a, b := acls[i], acls[j]
		if a.ResourceType != b.ResourceType {
			return a.ResourceType < b.ResourceType
		}
		if a.PatternType != b.PatternType {
			return a.PatternType < b.PatternType
		}
		if a.ResourceName != b.ResourceName {
			return a.ResourceName < b.ResourceName
		}
		if a.Principal != b.Principal {
			return a.Principal < b.Principal
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.Operation != b.Operation {
			return a.Operation < b.Operation
		}
		return a.Permission < b.Permission
	})
}

// Decide is the simple authorizer's decision for principal p from host on (t, name):
// a super user may do anything; a matching DENY wins over any ALLOW; with no ACL on the
// resource at all, allowIfNone decides (allow.everyone.if.no.acl.found); else a
// matching ALLOW (or one that implies op) allows, and nothing else does.
func (r *Rules) Decide(p Principal, host string, op Operation, t ResourceType, name string, allowIfNone bool) bool {
	ps := p.String()
	any, allowed := false, false
	for _, a := range r.byType[t] {
		if !a.matchesResource(t, name) {
			continue
		}
		any = true
		if !a.matchesPrincipal(ps) || !a.matchesHost(host) {
			continue
		}
		if a.Permission == Deny && a.denies(op) {
			return false
		}
		if a.Permission == Allow && a.grants(op) {
			allowed = true
		}
	}
	if !any {
		return allowIfNone
	}
	return allowed
}

// AnyAllowed says whether p may do op on some resource of type t: an ALLOW for it on any
// pattern, not undone by a DENY on every name (literal *, or the empty prefix). Apache's
// authorizeByResourceType, which lets a producer with WRITE on some topic be idempotent
// without IDEMPOTENT_WRITE on the cluster (KIP-679).
func (r *Rules) AnyAllowed(p Principal, host string, op Operation, t ResourceType) bool {
	ps := p.String()
	allowed := false
	for _, a := range r.byType[t] {
		if !a.matchesPrincipal(ps) || !a.matchesHost(host) {
			continue
		}
		if a.Permission == Deny && a.denies(op) &&
			((a.PatternType == Literal && a.ResourceName == Wildcard) || (a.PatternType == Prefixed && a.ResourceName == "")) {
			return false
		}
		if a.Permission == Allow && a.grants(op) {
			allowed = true
		}
	}
	return allowed
}

// Filter selects ACLs, as DescribeAcls and DeleteAcls give it (Apache's AclBindingFilter):
// ANY or a nil field matches everything; pattern type MATCH matches the ACLs that would
// apply to the named resource (the literal name, the literal *, and prefixes of it).
type Filter struct {
	ResourceType ResourceType
	ResourceName *string
	PatternType  PatternType
	Principal    *string
	Host         *string
	Operation    Operation
	Permission   Permission
}

// Matches says whether a is selected by f.
func (f Filter) Matches(a ACL) bool {
	if f.ResourceType != AnyResource && f.ResourceType != a.ResourceType {
		return false
	}
	switch f.PatternType {
	case AnyPattern:
		if f.ResourceName != nil && *f.ResourceName != a.ResourceName {
			return false
		}
	case Match:
		if f.ResourceName != nil {
			n := *f.ResourceName
			ok := (a.PatternType == Literal && (a.ResourceName == n || a.ResourceName == Wildcard)) ||
				(a.PatternType == Prefixed && strings.HasPrefix(n, a.ResourceName))
			if !ok {
				return false
			}
		}
	default:
		if f.PatternType != a.PatternType || (f.ResourceName != nil && *f.ResourceName != a.ResourceName) {
			return false
		}
	}
	if f.Principal != nil && *f.Principal != a.Principal {
		return false
	}
	if f.Host != nil && *f.Host != a.Host {
		return false
	}
	if f.Operation != AnyOperation && f.Operation != a.Operation {
		return false
	}
	if f.Permission != AnyPermission && f.Permission != a.Permission {
		return false
	}
	return true
}

// ValidateFilter refuses a filter whose enums are UNKNOWN (INVALID_REQUEST).
func (f Filter) Validate() error {
	if f.ResourceType < AnyResource || f.ResourceType > 7 {
		return fmt.Errorf("unknown resource type %d", f.ResourceType)
	}
	if f.PatternType < AnyPattern || f.PatternType > Prefixed {
		return fmt.Errorf("unknown pattern type %d", f.PatternType)
	}
	if f.Operation < AnyOperation || f.Operation > 14 {
		return fmt.Errorf("unknown operation %d", f.Operation)
	}
	if f.Permission < AnyPermission || f.Permission > Allow {
		return fmt.Errorf("unknown permission %d", f.Permission)
	}
	return nil
}
