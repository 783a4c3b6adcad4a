package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	kproc "kaas/e2e/proc"
	"kaas/internal/testwait"
)

// TestKillNineKeepsAcknowledgedCommits runs the broker as a real process, commits offsets
// from several clients in a loop, kill -9s it at random moments, restarts it, and checks
// that every acknowledged commit is there and no offset went backwards. Rounds alternate
// the checkpoint interval: 2 s (every commit of the round is only in the offsets journal
// when the kill comes, so the restart's replay must bring it back) and 5 ms (kills land
// while group files are being rewritten behind the journal, and segments deleted).
func TestKillNineKeepsAcknowledgedCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	const (
		committers = 4
		kills      = 6
		topicName  = "commits"
		parts      = 4
	)
	bin := kproc.Build(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	port := kproc.FreePort(t)

	type key struct {
		group string
		part  int32
	}
	var mu sync.Mutex
	acked := map[key]int64{} // highest acknowledged offset
	sent := map[key]int64{}  // highest offset ever sent
	next := map[key]int64{}
	totalAcks := 0

	for round := 0; round <= kills; round++ {
		checkpoint := []int{2000, 5}[round%2]
		b := kproc.Start(t, bin, dataDir, port, "--log.level=warn",
			fmt.Sprintf("--offsets.checkpoint.interval.ms=%d", checkpoint))
		if round > 0 {
			verifyCommits(t, b.Addr, topicName, func(group string, part int32, got int64) error {
				mu.Lock()
				defer mu.Unlock()
				k := key{group, part}
				if got < acked[k] {
					return fmt.Errorf("group %s partition %d: committed %d, but %d was acknowledged", group, part, got, acked[k])
				}
				if got > sent[k] {
					return fmt.Errorf("group %s partition %d: committed %d, never sent (max %d)", group, part, got, sent[k])
				}
				return nil
			}, committers, parts)
		}
		if round == kills {
			break
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.RetryTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		adm := kadm.NewClient(cl)
		if round == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := adm.CreateTopic(ctx, parts, 1, nil, topicName); err != nil {
				t.Fatalf("create topic: %v", err)
			}
			cancel()
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for c := 0; c < committers; c++ {
			group := fmt.Sprintf("crash-group-%d", c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					offs := kadm.Offsets{}
					mu.Lock()
					for p := int32(0); p < parts; p++ {
						k := key{group, p}
						next[k] += 1 + int64(rand.IntN(10))
						sent[k] = next[k]
						offs.Add(kadm.Offset{Topic: topicName, Partition: p, At: next[k], LeaderEpoch: -1})
					}
					mu.Unlock()
					resp, err := adm.CommitOffsets(ctx, group, offs)
					if err != nil || resp.Error() != nil {
						continue
					}
					mu.Lock()
					resp.Each(func(o kadm.OffsetResponse) {
						if o.Err == nil {
							k := key{group, o.Partition}
							if o.At > acked[k] {
								acked[k] = o.At
							}
							totalAcks++
						}
					})
					mu.Unlock()
				}
			}()
		}
		// Kill at a random moment once some commits were acknowledged in this round.
		mu.Lock()
		base := totalAcks
		mu.Unlock()
		// At most 15 s: the kill comes either way.
		_ = testwait.Until(15*time.Second, 2*time.Millisecond, func() error {
			mu.Lock()
			n := totalAcks - base
			mu.Unlock()
			if n < 40 {
				return fmt.Errorf("%d commits acknowledged", n)
			}
			return nil
		})
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		b.Kill()
		cancel()
		wg.Wait()
		cl.Close()
		mu.Lock()
		if totalAcks == base {
			mu.Unlock()
			t.Fatalf("round %d: no commit was acknowledged", round)
		}
		mu.Unlock()
	}
	mu.Lock()
	t.Logf("%d acknowledged partition commits across %d kills, all present after restart", totalAcks, kills)
	mu.Unlock()
}

func verifyCommits(t *testing.T, addr, topicName string, check func(string, int32, int64) error, groups, parts int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for g := 0; g < groups; g++ {
		group := fmt.Sprintf("crash-group-%d", g)
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatalf("fetch %s: %v", group, err)
		}
		for p := int32(0); p < int32(parts); p++ {
			got := int64(-1)
			if o, ok := offs.Lookup(topicName, p); ok {
				if o.Err != nil {
					t.Fatalf("fetch %s/%d: %v", group, p, o.Err)
				}
				got = o.At
			}
			if err := check(group, p, got); err != nil {
				t.Fatal(err)
			}
		}
	}
}
