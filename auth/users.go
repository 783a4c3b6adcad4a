package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"sort"
	"sync/atomic"

	"github.com/rs/zerolog"

	"kaas/storage"
)

// UsersFile is the name of the credentials file in <data.dir>/__cluster.
const UsersFile = "users.json"

// The SCRAM mechanisms, by their SASL names; ScramMechanisms in wire order
// (AlterUserScramCredentials numbers SCRAM-SHA-256 1 and SCRAM-SHA-512 2).
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	Plain       = "PLAIN"
)

// ScramMechanisms lists the SCRAM mechanisms, index+1 being the wire's number.
var ScramMechanisms = []string{ScramSHA256, ScramSHA512}

// MinIterations and MaxIterations bound a SCRAM credential's iterations as Apache does
// (ScramMechanism.minIterations 4096; AlterUserScramCredentials refuses more than 16384).
const (
	MinIterations = 4096
	MaxIterations = 16384
)

func hashOf(mechanism string) func() hash.Hash {
	switch mechanism {
	case ScramSHA256:
		return sha256.New
	case ScramSHA512:
		return sha512.New
	}
	return nil
}

// Credential is one user's SCRAM credential for one mechanism, as Apache keeps it
// (salt, iterations, stored key, server key, RFC 5802): never the password, nor the
// salted password.
type Credential struct {
	Salt       []byte `json:"salt"`
	Iterations int    `json:"iterations"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// CredentialFromSalted derives the stored and server keys from a salted password, what
// AlterUserScramCredentials carries.
func CredentialFromSalted(mechanism string, salt, salted []byte, iterations int) (Credential, error) {
	h := hashOf(mechanism)
	if h == nil {
		return Credential{}, fmt.Errorf("unknown SCRAM mechanism %q", mechanism)
	}
	clientKey := hmacOf(h, salted, "Client Key")
	stored := h()
	stored.Write(clientKey)
	return Credential{Salt: salt, Iterations: iterations, StoredKey: stored.Sum(nil),
		ServerKey: hmacOf(h, salted, "Server Key")}, nil
}

// NewCredential makes a credential for password with a fresh random salt.
func NewCredential(mechanism, password string, iterations int) (Credential, error) {
	h := hashOf(mechanism)
	if h == nil {
		return Credential{}, fmt.Errorf("unknown SCRAM mechanism %q", mechanism)
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return Credential{}, err
	}
	salted, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return Credential{}, err
	}
	return CredentialFromSalted(mechanism, salt, salted, iterations)
}

// verify says whether password is the one c was made from.
func (c Credential) verify(mechanism, password string) bool {
	h := hashOf(mechanism)
	if h == nil || c.Iterations < 1 {
		return false
	}
	salted, err := pbkdf2.Key(h, password, c.Salt, c.Iterations, h().Size())
	if err != nil {
		return false
	}
	got, err := CredentialFromSalted(mechanism, c.Salt, salted, c.Iterations)
	return err == nil && subtle.ConstantTimeCompare(got.StoredKey, c.StoredKey) == 1
}

func hmacOf(h func() hash.Hash, key []byte, msg string) []byte {
	m := hmac.New(h, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// usersFile is users.json: per user, per mechanism, a credential.
type usersFile struct {
	Version int                              `json:"version"`
	Users   map[string]map[string]Credential `json:"users"`
}

// CredentialsConfig is what the credential store needs.
type CredentialsConfig struct {
	Dir string // <data.dir>/__cluster
	FS  storage.FS
	Log zerolog.Logger
}

// Credentials is the SASL users of the cluster, from users.json: read without a lock,
// rewritten by AlterUserScramCredentials (Alter), picked up from disk by Poll.
type Credentials struct {
	cfg     CredentialsConfig
	file    sharedFile
	users   atomic.Pointer[map[string]map[string]Credential]
	version atomic.Uint64
	// secret derives the credential of a user that does not exist, so that a SCRAM
	// exchange for one fails at the proof like a wrong password, not at the first step.
	secret []byte
}

// NewCredentials loads users.json (no file: no users) and the secret unknown users'
// credentials derive from (LoadSecret). A file that does not parse refuses the start.
func NewCredentials(cfg CredentialsConfig) (*Credentials, error) {
	secret, err := LoadSecret(cfg.FS, cfg.Dir)
	if err != nil {
		return nil, err
	}
	c := &Credentials{cfg: cfg, file: sharedFile{fs: cfg.FS, dir: cfg.Dir, name: UsersFile}, secret: secret}
	empty := map[string]map[string]Credential{}
	c.users.Store(&empty)
	if _, err := c.file.load(true, c.parse); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Credentials) parse(b []byte) error {
	f, err := decodeUsers(b)
	if err != nil {
		return err
	}
	for user, mechs := range f.Users {
		for m, cr := range mechs {
			if hashOf(m) == nil {
				return fmt.Errorf("user %q: unknown mechanism %q", user, m)
			}
			// Bounded as AlterUserScramCredentials bounds them: a PLAIN login derives the
			// key with this many rounds, and an edited file must not make that take hours.
			if cr.Iterations < MinIterations || cr.Iterations > MaxIterations || len(cr.StoredKey) == 0 || len(cr.ServerKey) == 0 {
				return fmt.Errorf("user %q: %s credential needs iterations in %d-%d and both keys", user, m, MinIterations, MaxIterations)
			}
		}
	}
	c.users.Store(&f.Users)
	c.version.Add(1)
	return nil
}

// decodeUsers reads users.json (nil: a file that was never there, no users). No key may
// appear twice (checkKeys); user names and mechanisms (depths 1 and 2) are map keys, told
// apart by case.
func decodeUsers(b []byte) (usersFile, error) {
	f := usersFile{Version: 1, Users: map[string]map[string]Credential{}}
	if b == nil {
		return f, nil
	}
	if err := checkKeys(b, func(d int) bool { return d == 1 || d == 2 }); err != nil {
		return f, fmt.Errorf("parse users: %w", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("parse users: %w", err)
	}
	if f.Version != 1 {
		return f, fmt.Errorf("users file version %d is not 1", f.Version)
	}
	if f.Users == nil {
		f.Users = map[string]map[string]Credential{}
	}
	return f, nil
}

// Poll takes up users.json if it changed on disk.
func (c *Credentials) Poll() {
	changed, err := c.file.load(false, c.parse)
	if err != nil {
		c.cfg.Log.Error().Err(err).Msg("users_file_refused_previous_users_kept")
		return
	}
	if changed {
		c.cfg.Log.Info().Int("users", len(*c.users.Load())).Msg("users_reloaded")
	}
}

// Version counts the versions of users.json taken up.
func (c *Credentials) Version() uint64 { return c.version.Load() }

// Lookup is user's credential for mechanism.
func (c *Credentials) Lookup(user, mechanism string) (Credential, bool) {
	cr, ok := (*c.users.Load())[user][mechanism]
	return cr, ok
}

// FakeIterations is the iteration count of an unknown user's credential: the count
// real users get by default (kaas users set --iterations, Apache's kafka-configs).
const FakeIterations = MinIterations

// saltLen is the length of a salt NewCredential makes, and so of an unknown user's.
const saltLen = 32

// fake is the credential of a user that does not exist, matching no password. Its salt
// looks like a real user's (the same length and iterations) and is the same from every
// broker sharing the volume and across restarts, derived from the cluster's secret: a
// salt that changed between asks, or between brokers, would tell that the user is not
// there.
func (c *Credentials) fake(user, mechanism string) Credential {
	h := hashOf(mechanism)
	salt := hmacOf(sha256.New, c.secret, mechanism+"\x00"+user)[:saltLen]
	k := hmacOf(sha256.New, c.secret, "keys\x00"+mechanism+"\x00"+user)
	return Credential{Salt: salt, Iterations: FakeIterations, StoredKey: hmacOf(h, k, "stored"), ServerKey: hmacOf(h, k, "server")}
}

// VerifyPlain checks a PLAIN password against the user's SCRAM-SHA-512 credential, or
// its SCRAM-SHA-256 one: users.json keeps no password, and PLAIN needs none of its own.
func (c *Credentials) VerifyPlain(user, password string) bool {
	for _, m := range []string{ScramSHA512, ScramSHA256} {
		if cr, ok := c.Lookup(user, m); ok {
			return cr.verify(m, password)
		}
	}
	// The same work for a user that does not exist.
	c.fake(user, ScramSHA512).verify(ScramSHA512, password)
	return false
}

// UserMechanisms is one user's mechanisms and iterations (DescribeUserScramCredentials).
type UserMechanisms struct {
	User       string
	Mechanisms []string
	Iterations []int
}

// Describe lists users (all of them when users is nil); a named user without
// credentials comes back with no mechanisms.
func (c *Credentials) Describe(users []string) []UserMechanisms {
	all := *c.users.Load()
	if users == nil {
		for u := range all {
			users = append(users, u)
		}
		sort.Strings(users)
	}
	out := make([]UserMechanisms, 0, len(users))
	for _, u := range users {
		um := UserMechanisms{User: u}
		for _, m := range ScramMechanisms {
			if cr, ok := all[u][m]; ok {
				um.Mechanisms = append(um.Mechanisms, m)
				um.Iterations = append(um.Iterations, cr.Iterations)
			}
		}
		out = append(out, um)
	}
	return out
}

// Change is one upsertion (Credential set) or deletion (Credential nil) of a user's
// credential for one mechanism.
type Change struct {
	User       string
	Mechanism  string
	Credential *Credential
}

// ErrNoSuchCredential is the result of deleting a credential that does not exist.
var ErrNoSuchCredential = errors.New("no such credential")

// Alter applies changes in one rewrite of users.json; errs[i] is change i's failure
// (ErrNoSuchCredential), err a failure of the whole write.
func (c *Credentials) Alter(changes []Change) (errs []error, err error) {
	errs = make([]error, len(changes))
	err = c.file.update(func(old []byte) ([]byte, error) {
		f, err := decodeUsers(old)
		if err != nil {
			return nil, err
		}
		for i := range errs {
			errs[i] = nil
		}
		for i, ch := range changes {
			if ch.Credential == nil {
				if _, ok := f.Users[ch.User][ch.Mechanism]; !ok {
					errs[i] = ErrNoSuchCredential
					continue
				}
				delete(f.Users[ch.User], ch.Mechanism)
				if len(f.Users[ch.User]) == 0 {
					delete(f.Users, ch.User)
				}
				continue
			}
			if f.Users[ch.User] == nil {
				f.Users[ch.User] = map[string]Credential{}
			}
			f.Users[ch.User][ch.Mechanism] = *ch.Credential
		}
		b, err := json.MarshalIndent(f, "", "  ")
		return append(b, '\n'), err
	}, c.parse)
	return errs, err
}
