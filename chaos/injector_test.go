package chaos

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The n-th visit of a site gets the same decision under the same seed whatever order
// the sites are visited in: a seed replays its schedule. Another seed gives another.
func TestSameSeedSameDecisions(t *testing.T) {
	rates := Rates{Panic: 0.2, Delay: 0.2}
	sites := []string{"receive/group/*group.JoinGroup", "receive/partition/*partition.readLog", "timer/*group.sessionCheck", "disk/sync/journal"}
	type decision struct {
		site string
		n    uint64
		kind Kind
		v    float64
	}
	run := func(seed uint64, order []string, concurrent bool) []decision {
		in := New(seed, rates)
		var mu sync.Mutex
		var out []decision
		visit := func(name string) {
			k, n, v := in.visit(name, Panic, Delay)
			if k != "" {
				mu.Lock()
				out = append(out, decision{name, n, k, v})
				mu.Unlock()
			}
		}
		if concurrent {
			var wg sync.WaitGroup
			for _, name := range sites {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 200 {
						visit(name)
					}
				}()
			}
			wg.Wait()
		} else {
			for _, name := range order {
				visit(name)
			}
		}
		slices.SortFunc(out, func(a, b decision) int {
			if a.site != b.site {
				if a.site < b.site {
					return -1
				}
				return 1
			}
			return int(a.n) - int(b.n)
		})
		return out
	}
	var order []string
	for _, s := range sites {
		for range 200 {
			order = append(order, s)
		}
	}
	a := run(42, order, false)
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	b := run(42, order, false)
	c := run(42, nil, true)
	if len(a) == 0 {
		t.Fatal("no fault decided at rates of 40%")
	}
	if !slices.Equal(a, b) || !slices.Equal(a, c) {
		t.Fatalf("seed 42 decided differently in another order: %d, %d, %d decisions", len(a), len(b), len(c))
	}
	if d := run(43, order, false); slices.Equal(a, d) {
		t.Fatal("seeds 42 and 43 decided the same")
	}
}

// Kinds not enabled never fire, and an injector that is off fires nothing.
func TestInjectorOffAndKinds(t *testing.T) {
	in := New(1, Rates{Panic: 1, Delay: 1}, Delay)
	for range 100 {
		if k, _, _ := in.visit("x", Panic, Delay); k != Delay {
			t.Fatalf("decided %q with only delay enabled at rate 1", k)
		}
	}
	if (actorFaults{in}).Receive(nil, 1) {
		t.Fatal("an injector that is off asked for a panic")
	}
	if len(in.Schedule()) != 0 {
		t.Fatalf("off injector recorded %v", in.Schedule())
	}
}

// The transaction coordinator's files and a segment's aborted-transaction index are
// fault sites of their own, not a partition segment's or the catalogue's.
func TestFileKinds(t *testing.T) {
	for path, want := range map[string]string{
		"/d/transactions/journal/00000000000000000001.log":   "txn_journal",
		"/d/transactions/journal":                            "txn_journal",
		"/d/transactions/ids/tx.json.tmp":                    "txn_id",
		"/d/transactions/ids":                                "txn_id",
		"/d/topics/t/0/00000000000000000000.txnindex":        "txnindex",
		"/d/topics/t/0/00000000000000000000.log":             "log",
		"/d/topics/transactions/0/00000000000000000000.log":  "log",
		"/d/__cluster/__offsets_journal/node-0/00000001.log": "journal",
		"/d/topics/t/0/recovery-point":                       "recovery_point",
	} {
		if got := fileKind(path); got != want {
			t.Errorf("fileKind(%s) = %s, want %s", path, got, want)
		}
	}
}

// Invariant 6's check of the transactional producers finds a committed transaction
// missing a record or seen twice, an aborted or abandoned one visible, an unknown one
// seen in part, and records of a transaction nobody began; it passes the rest.
func TestCheckTxns(t *testing.T) {
	rec := func(key string, p int32, k int) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Partition: p, Value: []byte(strconv.Itoa(int(p)*perPart + k))}
	}
	whole := func(key string, parts []int32) []*kgo.Record {
		var out []*kgo.Record
		for _, p := range parts {
			for k := range perPart {
				out = append(out, rec(key, p, k))
			}
		}
		return out
	}
	parts := []int32{0, 1, 2}
	ledger := []*txnRec{
		{key: "ok-c", parts: parts, commit: true, told: committed},
		{key: "ok-a", parts: parts, told: aborted},
		{key: "ok-u-none", parts: parts, commit: true, told: unknown},
		{key: "ok-u-all", parts: parts, commit: true, told: unknown},
		{key: "bad-c-part", parts: parts, commit: true, told: committed},
		{key: "bad-c-twice", parts: parts, commit: true, told: committed},
		{key: "bad-a", parts: parts, told: aborted},
		{key: "bad-abandoned", parts: parts, told: abandoned},
		{key: "bad-u-part", parts: parts, commit: true, told: unknown},
	}
	var recs []*kgo.Record
	recs = append(recs, whole("ok-c", parts)...)
	recs = append(recs, whole("ok-u-all", parts)...)
	recs = append(recs, whole("bad-c-part", parts)[1:]...)
	recs = append(recs, whole("bad-c-twice", parts)...)
	recs = append(recs, rec("bad-c-twice", 0, 0))
	recs = append(recs, rec("bad-a", 1, 0))
	recs = append(recs, rec("bad-abandoned", 2, 1))
	recs = append(recs, whole("bad-u-part", parts)[:3]...)
	recs = append(recs, rec("stray", 0, 0))
	vs, counts := checkTxns(ledger, recs)
	got := map[string]bool{}
	for _, v := range vs {
		for _, tx := range append(ledger, &txnRec{key: "stray"}) {
			if strings.Contains(v, " "+tx.key+" ") {
				got[tx.key] = true
			}
		}
	}
	for _, tx := range append(ledger, &txnRec{key: "stray"}) {
		if bad := !strings.HasPrefix(tx.key, "ok-"); got[tx.key] != bad {
			t.Errorf("%s: reported %v, want %v (violations: %q)", tx.key, got[tx.key], bad, vs)
		}
	}
	if counts[committed] != 3 || counts[unknown] != 3 {
		t.Errorf("counts %v", counts)
	}
}
