package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func ps(names ...string) []Protocol {
	out := make([]Protocol, len(names))
	for i, n := range names {
		out[i] = Protocol{Name: n}
	}
	return out
}

func TestSelectProtocol(t *testing.T) {
	for _, c := range []struct {
		members [][]Protocol
		want    string
		ok      bool
	}{
		{[][]Protocol{ps("range", "roundrobin"), ps("roundrobin", "range"), ps("roundrobin", "range")}, "roundrobin", true},
		{[][]Protocol{ps("range", "roundrobin"), ps("roundrobin", "foo")}, "roundrobin", true},
		{[][]Protocol{ps("range", "roundrobin"), ps("roundrobin", "range")}, "range", true}, // tie: the first member's order
		{[][]Protocol{ps("range")}, "range", true},
		{[][]Protocol{ps("range"), ps("roundrobin")}, "", false},
		{nil, "", false},
	} {
		got, ok := selectProtocol(c.members)
		if got != c.want || ok != c.ok {
			t.Errorf("%v: got %q %v, want %q %v", c.members, got, ok, c.want, c.ok)
		}
	}
}

func TestSupportsProtocols(t *testing.T) {
	sup := map[string]int{"range": 2, "roundrobin": 1}
	for _, c := range []struct {
		empty bool
		ptype string
		ps    []Protocol
		want  bool
	}{
		{true, "consumer", ps("x"), true},
		{true, "", ps("x"), false},
		{true, "consumer", nil, false},
		{false, "consumer", ps("range"), true},
		{false, "consumer", ps("roundrobin"), false},
		{false, "connect", ps("range"), false},
	} {
		if got := supportsProtocols(c.empty, "consumer", 2, sup, c.ptype, c.ps); got != c.want {
			t.Errorf("%+v: got %v", c, got)
		}
	}
}

func TestAcceptJoin(t *testing.T) {
	for _, c := range []struct {
		s                 state
		known, awaiting   bool
		numAwaiting, size int
		want              bool
	}{
		{stateEmpty, false, false, 0, 9, true},
		{statePreparingRebalance, false, false, 3, 9, true},
		{statePreparingRebalance, false, false, 4, 0, false},
		{statePreparingRebalance, true, true, 4, 9, true},
		{stateStable, true, false, 0, 5, true},
		{stateStable, false, false, 0, 4, false},
		{stateCompletingRebalance, false, false, 0, 3, true},
	} {
		if got := acceptJoin(c.s, 4, c.known, c.awaiting, c.numAwaiting, c.size); got != c.want {
			t.Errorf("%+v: got %v", c, got)
		}
	}
}

func TestMemberCheck(t *testing.T) {
	for _, c := range []struct {
		member, instance, owner string
		known, instKnown        bool
		want                    int16
	}{
		{"m", "", "", true, false, 0},
		{"m", "", "", false, false, kerr.UnknownMemberID.Code},
		{"m", "i", "m", true, true, 0},
		{"x", "i", "m", false, true, kerr.FencedInstanceID.Code},
		{"", "i", "m", false, true, kerr.FencedInstanceID.Code},
		{"m", "i", "", true, false, kerr.UnknownMemberID.Code},
	} {
		if got := memberCheck(c.member, c.instance, c.known, c.owner, c.instKnown); got != c.want {
			t.Errorf("%+v: got %d", c, got)
		}
	}
}

// The check order of §4.7 (Apache 4.0).
func TestCommitCheck(t *testing.T) {
	unknown, fenced := kerr.UnknownMemberID.Code, kerr.FencedInstanceID.Code
	for _, c := range []struct {
		name     string
		exists   bool
		s        state
		gen      int32
		member   string
		instance string
		check    int16
		v9       bool
		want     int16
	}{
		{"unknown group, simple", false, stateEmpty, -1, "", "", unknown, false, 0},
		{"unknown group, generation", false, stateEmpty, 1, "m", "", unknown, false, kerr.IllegalGeneration.Code},
		{"unknown group, generation, v9", false, stateEmpty, 1, "m", "", unknown, true, kerr.GroupIDNotFound.Code},
		{"empty, simple with member", true, stateEmpty, -1, "x", "i", unknown, false, 0},
		{"dead", true, stateDead, -1, "", "", 0, false, kerr.CoordinatorNotAvailable.Code},
		{"stable, unknown member", true, stateStable, 3, "x", "", unknown, false, unknown},
		{"stable, fenced", true, stateStable, 3, "x", "i", fenced, false, fenced},
		{"stable, generation", true, stateStable, 2, "m", "", 0, false, kerr.IllegalGeneration.Code},
		{"stable, ok", true, stateStable, 3, "m", "", 0, false, 0},
		{"stable, no member no generation", true, stateStable, -1, "", "", unknown, false, unknown},
		{"completing", true, stateCompletingRebalance, 3, "m", "", 0, false, kerr.RebalanceInProgress.Code},
		{"completing, generation first", true, stateCompletingRebalance, 4, "m", "", 0, false, kerr.IllegalGeneration.Code},
		{"preparing, current generation", true, statePreparingRebalance, 3, "m", "", 0, false, 0},
	} {
		if got := commitCheck(c.exists, c.s, 3, c.gen, c.member, c.instance, c.check, c.v9); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
}

func TestExpiryRule(t *testing.T) {
	topics := map[string]bool{"foo": true}
	for _, c := range []struct {
		s      state
		ptype  string
		known  bool
		ok     bool
		stable bool
	}{
		{stateEmpty, "consumer", true, true, false},
		{stateEmpty, "", false, true, false},
		{stateStable, "consumer", true, true, true},
		{stateStable, "consumer", false, false, false},
		{stateStable, "connect", true, false, false},
		{statePreparingRebalance, "consumer", true, false, false},
		{stateCompletingRebalance, "consumer", true, false, false},
	} {
		r, ok := expiryRule(c.s, c.ptype, topics, c.known, time.Minute)
		if ok != c.ok || r.StableConsumer != c.stable || (ok && r.Retention != time.Minute) {
			t.Errorf("%+v: got %+v %v", c, r, ok)
		}
	}
}

func TestSubscriptions(t *testing.T) {
	topics, known := subscriptions("consumer", [][]byte{subscriptionTo("a", "b"), subscriptionTo("c")})
	if !known || !topics["a"] || !topics["c"] || topics["d"] {
		t.Fatalf("%v %v", topics, known)
	}
	if _, known := subscriptions("consumer", [][]byte{{0xff}}); known {
		t.Fatal("garbage parsed")
	}
	if !subscribedTo("consumer", nil, false, "x") || subscribedTo("other", nil, false, "x") {
		t.Fatal("unknown subscriptions")
	}
	if !matchesFilter([]string{"empty"}, "Empty") || matchesFilter([]string{"Stable"}, "Empty") || !matchesFilter(nil, "Dead") {
		t.Fatal("filters")
	}
	if !validSessionTimeout(10, 10, 20) || validSessionTimeout(9, 10, 20) || validSessionTimeout(21, 10, 20) {
		t.Fatal("session bounds")
	}
}
