package chaos

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
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
