package registry

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseAssignment(t *testing.T) {
	raw := `{"version":1,
	 "consumerGroups":[{"group":"orders-app","broker":1},{"group":"billing","broker":0}],
	 "transactionalIds":[{"id":"payments-1","broker":2}],
	 "partitions":[{"topic":"orders","partition":0,"broker":2},{"topic":"orders","partition":1,"broker":2}]}`
	a, err := ParseAssignment([]byte(raw), 3)
	if err != nil {
		t.Fatal(err)
	}
	for g, want := range map[string]int32{"orders-app": 1, "billing": 0} {
		if b, ok := a.group(g); !ok || b != want {
			t.Errorf("group %s = %d, %v; want %d", g, b, ok, want)
		}
	}
	if _, ok := a.group("other"); ok {
		t.Error("a group the file does not name is assigned")
	}
	if b, ok := a.txn("payments-1"); !ok || b != 2 {
		t.Errorf("txn payments-1 = %d, %v", b, ok)
	}
	if _, ok := a.txn("orders-app"); ok {
		t.Error("a group's entry answered for a transactional id of the same name")
	}
	if b, ok := a.partition("orders", 1); !ok || b != 2 {
		t.Errorf("orders/1 = %d, %v", b, ok)
	}
	if _, ok := a.partition("orders", 2); ok {
		t.Error("orders/2 is assigned")
	}
	if len(a.Digest()) != 16 {
		t.Errorf("digest %q, want 16 hex digits", a.Digest())
	}
	same, err := ParseAssignment([]byte(raw), 3)
	if err != nil || same.Digest() != a.Digest() {
		t.Errorf("the same bytes digest differently: %q, %q (%v)", a.Digest(), same.Digest(), err)
	}
	other, err := ParseAssignment([]byte(strings.Replace(raw, `"billing","broker":0`, `"billing","broker":2`, 1)), 3)
	if err != nil || other.Digest() == a.Digest() {
		t.Errorf("a changed owner keeps the digest %q (%v)", a.Digest(), err)
	}
	var none *Assignment
	if none.Digest() != "" {
		t.Error("no assignment has a digest")
	}
	if _, ok := none.group("orders-app"); ok {
		t.Error("no assignment assigns a group")
	}
	// empty lists are fine; a dev-sized check (size 0) accepts any broker id >= 0
	if _, err := ParseAssignment([]byte(`{"version":1}`), 3); err != nil {
		t.Errorf("an assignment of nothing: %v", err)
	}
	if _, err := ParseAssignment([]byte(`{"version":1,"consumerGroups":[{"group":"g","broker":40}]}`), 0); err != nil {
		t.Errorf("size 0: %v", err)
	}
}

// Each bad file is refused with an error naming what is wrong, never half-applied.
func TestParseAssignmentRefuses(t *testing.T) {
	for _, tc := range []struct{ name, raw, want string }{
		{"empty", ``, "decode"},
		{"not json", `version: 1`, "decode"},
		{"null", `null`, "version 0"},
		{"no version", `{}`, "version 0"},
		{"version 2", `{"version":2}`, "version 2"},
		{"unknown field", `{"version":1,"groups":[]}`, "unknown field"},
		{"unknown entry field", `{"version":1,"consumerGroups":[{"group":"g","broker":1,"rack":"a"}]}`, "unknown field"},
		{"trailing", `{"version":1} {"version":1}`, "trailing"},
		{"wrong type", `{"version":1,"consumerGroups":[{"group":"g","broker":"1"}]}`, "decode"},
		{"broker beyond int32", `{"version":1,"consumerGroups":[{"group":"g","broker":4294967296}]}`, "decode"},
		{"group twice", `{"version":1,"consumerGroups":[{"group":"g","broker":1},{"group":"g","broker":1}]}`, `group "g" twice`},
		{"group broker outside", `{"version":1,"consumerGroups":[{"group":"g","broker":3}]}`, "outside the cluster"},
		{"group broker negative", `{"version":1,"consumerGroups":[{"group":"g","broker":-1}]}`, "outside the cluster"},
		{"txn twice", `{"version":1,"transactionalIds":[{"id":"x","broker":1},{"id":"x","broker":2}]}`, `id "x" twice`},
		{"txn broker outside", `{"version":1,"transactionalIds":[{"id":"x","broker":5}]}`, "outside the cluster"},
		{"partition twice", `{"version":1,"partitions":[{"topic":"t","partition":1,"broker":0},{"topic":"t","partition":1,"broker":1}]}`, "t/1 twice"},
		{"partition negative", `{"version":1,"partitions":[{"topic":"t","partition":-1,"broker":0}]}`, "negative"},
		{"partition broker outside", `{"version":1,"partitions":[{"topic":"t","partition":0,"broker":3}]}`, "outside the cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseAssignment([]byte(tc.raw), 3)
			if err == nil {
				t.Fatalf("accepted %s: %+v", tc.raw, a)
			}
			if a != nil {
				t.Errorf("refused but returned %+v", a)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// FuzzParseAssignment: ParseAssignment never panics; what it accepts has every entry
// within the cluster and no key twice, and encodes back into a file that parses to the
// same routes; what it refuses comes back as an error and no assignment.
func FuzzParseAssignment(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"consumerGroups":[{"group":"orders-app","broker":1}],"transactionalIds":[{"id":"payments-1","broker":2}],"partitions":[{"topic":"orders","partition":0,"broker":2}]}`,
		`{"version":1}`,
		`{"version":1,"consumerGroups":[{"group":"g","broker":1},{"group":"g","broker":1}]}`,
		`{"version":1,"partitions":[{"topic":"t","partition":-1,"broker":0}]}`,
		`{"version":1,"consumerGroups":[{"group":"\u00e9\ud800","broker":0}]}`,
		`{"VERSION":1,"ConsumerGroups":[{"Group":"g","BROKER":2}]}`,
		`{"version":1} x`,
		`[]`,
		`null`,
		``,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, raw []byte, size uint8) {
		a, err := ParseAssignment(raw, int(size))
		if err != nil {
			if a != nil {
				t.Fatalf("error %v with an assignment", err)
			}
			return
		}
		if a == nil {
			t.Fatal("no error and no assignment")
		}
		if a.Version != 1 {
			t.Fatalf("accepted version %d", a.Version)
		}
		in := func(b int32) bool { return b >= 0 && (size == 0 || int(b) < int(size)) }
		if len(a.groups) != len(a.ConsumerGroups) || len(a.txns) != len(a.TransactionalIDs) || len(a.parts) != len(a.Partitions) {
			t.Fatalf("a key twice accepted: %d groups in %d entries, %d ids in %d, %d partitions in %d",
				len(a.groups), len(a.ConsumerGroups), len(a.txns), len(a.TransactionalIDs), len(a.parts), len(a.Partitions))
		}
		for _, e := range a.ConsumerGroups {
			if b, ok := a.group(e.Group); !ok || b != e.Broker || !in(b) {
				t.Fatalf("group %q: %d, %v (entry %d, size %d)", e.Group, b, ok, e.Broker, size)
			}
		}
		for _, e := range a.TransactionalIDs {
			if b, ok := a.txn(e.ID); !ok || b != e.Broker || !in(b) {
				t.Fatalf("txn %q: %d, %v (entry %d, size %d)", e.ID, b, ok, e.Broker, size)
			}
		}
		for _, e := range a.Partitions {
			if b, ok := a.partition(e.Topic, e.Partition); !ok || b != e.Broker || !in(b) || e.Partition < 0 {
				t.Fatalf("partition %q/%d: %d, %v (entry %d, size %d)", e.Topic, e.Partition, b, ok, e.Broker, size)
			}
		}
		out, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("encode an accepted assignment: %v", err)
		}
		b, err := ParseAssignment(out, int(size))
		if err != nil {
			t.Fatalf("an accepted assignment, encoded again, is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(a.groups, b.groups) || !reflect.DeepEqual(a.txns, b.txns) || !reflect.DeepEqual(a.parts, b.parts) {
			t.Fatalf("routes changed through a round trip:\n%+v\n%+v", a, b)
		}
		if again, err := json.Marshal(b); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("entries changed through a round trip:\n%s\n%s (%v)", out, again, err)
		}
	})
}
