package auth

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/rs/zerolog"

	"kaas/storage"
)

// ACLsFile is the name of the ACL file in <data.dir>/__cluster.
const ACLsFile = "acls.json"

// AuthorizerConfig is what the simple authorizer needs.
type AuthorizerConfig struct {
	// Dir is <data.dir>/__cluster; FS writes there.
	Dir string
	FS  storage.FS
	// SuperUsers may do anything (super.users).
	SuperUsers []Principal
	// AllowIfNoACL allows any principal on a resource no ACL names
	// (allow.everyone.if.no.acl.found, false by default).
	AllowIfNoACL bool
	Log          zerolog.Logger
}

// Authorizer is Apache's simple ACL authorizer over acls.json. A nil *Authorizer is
// authorization off: everything is allowed, as Apache without authorizer.class.name.
// Decisions read the current Rules without a lock; CreateAcls and DeleteAcls rewrite the
// file (Create, Delete) and Poll picks up another broker's change.
type Authorizer struct {
	cfg   AuthorizerConfig
	super map[string]bool
	file  sharedFile
	rules atomic.Pointer[Rules]
	// version counts the versions of the rules this broker has taken up.
	version atomic.Uint64
}

// aclFile is acls.json.
type aclFile struct {
	Version int   `json:"version"`
	ACLs    []ACL `json:"acls"`
}

// NewAuthorizer loads acls.json (no file: no ACLs). A file that does not parse refuses
// the start: serving with none of its DENYs would open what the operator closed.
func NewAuthorizer(cfg AuthorizerConfig) (*Authorizer, error) {
	a := &Authorizer{cfg: cfg, super: map[string]bool{},
		file: sharedFile{fs: cfg.FS, dir: cfg.Dir, name: ACLsFile}}
	for _, p := range cfg.SuperUsers {
		a.super[p.String()] = true
	}
	a.rules.Store(NewRules(nil))
	if _, err := a.file.load(true, a.parse); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Authorizer) parse(b []byte) error {
	f, err := decodeACLFile(b)
	if err != nil {
		return err
	}
	a.rules.Store(NewRules(f.ACLs))
	a.version.Add(1)
	return nil
}

// Poll takes up the file if it changed on disk since it was last read. A file that no
// longer parses is logged (once per version) and the rules in force stay.
func (a *Authorizer) Poll() {
	changed, err := a.file.load(false, a.parse)
	if err != nil {
		a.cfg.Log.Error().Err(err).Msg("acls_file_refused_previous_acls_kept")
		return
	}
	if changed {
		a.cfg.Log.Info().Int("acls", len(a.Rules().acls)).Msg("acls_reloaded")
	}
}

// Version counts the versions of the ACLs taken up (tests wait on it).
func (a *Authorizer) Version() uint64 {
	if a == nil {
		return 0
	}
	return a.version.Load()
}

// Rules is the ACLs in force.
func (a *Authorizer) Rules() *Rules { return a.rules.Load() }

// IsSuperUser says whether p is in super.users.
func (a *Authorizer) IsSuperUser(p Principal) bool { return a != nil && a.super[p.String()] }

// Authorize says whether p, connected from host, may do op on the resource (t, name).
func (a *Authorizer) Authorize(p Principal, host string, op Operation, t ResourceType, name string) bool {
	if a == nil || a.super[p.String()] {
		return true
	}
	return a.rules.Load().Decide(p, host, op, t, name, a.cfg.AllowIfNoACL)
}

// AnyAllowed says whether p may do op on some resource of type t (Rules.AnyAllowed).
func (a *Authorizer) AnyAllowed(p Principal, host string, op Operation, t ResourceType) bool {
	if a == nil || a.super[p.String()] {
		return true
	}
	return a.rules.Load().AnyAllowed(p, host, op, t)
}

// AuthorizedOperations is the bitmap of ops p may do on (t, name) (bit n for operation
// n), as DescribeGroups and Metadata report it (KIP-430).
func (a *Authorizer) AuthorizedOperations(p Principal, host string, t ResourceType, name string, ops []Operation) int32 {
	var bits int32
	for _, op := range ops {
		if a.Authorize(p, host, op, t, name) {
			bits |= 1 << op
		}
	}
	return bits
}

// Create adds acls (each already valid) to the file.
func (a *Authorizer) Create(acls []ACL) error {
	return a.file.update(func(old []byte) ([]byte, error) {
		f, err := decodeACLFile(old)
		if err != nil {
			return nil, err
		}
		rules := NewRules(append(f.ACLs, acls...))
		return encodeACLFile(rules.acls)
	}, a.parse)
}

// Delete removes the ACLs each filter matches and returns them, per filter (an ACL two
// filters match is reported under both, as Apache does).
func (a *Authorizer) Delete(filters []Filter) ([][]ACL, error) {
	matched := make([][]ACL, len(filters))
	err := a.file.update(func(old []byte) ([]byte, error) {
		f, err := decodeACLFile(old)
		if err != nil {
			return nil, err
		}
		current := NewRules(f.ACLs).acls
		var keep []ACL
		for _, acl := range current {
			gone := false
			for i, flt := range filters {
				if flt.Matches(acl) {
					matched[i] = append(matched[i], acl)
					gone = true
				}
			}
			if !gone {
				keep = append(keep, acl)
			}
		}
		return encodeACLFile(keep)
	}, a.parse)
	if err != nil {
		return nil, err
	}
	return matched, nil
}

// decodeACLFile reads acls.json (nil: a file that was never there, no ACLs). Every rule
// must be valid (ACL.UnmarshalJSON) and no key may appear twice (checkKeys): a rule that
// would not apply as written refuses the whole file.
func decodeACLFile(b []byte) (aclFile, error) {
	if b == nil {
		return aclFile{Version: 1}, nil
	}
	var f aclFile
	if err := checkKeys(b, func(int) bool { return false }); err != nil {
		return f, fmt.Errorf("parse ACLs: %w", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("parse ACLs: %w", err)
	}
	if f.Version != 1 {
		return f, fmt.Errorf("ACL file version %d is not 1", f.Version)
	}
	return f, nil
}

func encodeACLFile(acls []ACL) ([]byte, error) {
	if acls == nil {
		acls = []ACL{}
	}
	b, err := json.MarshalIndent(aclFile{Version: 1, ACLs: acls}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
