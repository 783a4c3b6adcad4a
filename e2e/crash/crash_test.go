package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	kproc "kaas/e2e/proc"
	"kaas/internal/testwait"
)

// segmentFlags make segments roll often, so recovery crosses segments.
var segmentFlags = []string{"--log.level=warn", "--log.segment.bytes=65536"}

const (
	topic      = "crash"
	partitions = 3
	rounds     = 4
)

type acked struct {
	offset int64
	value  string
}

// tearTails appends half a batch of garbage to the newest segment of every partition,
// as a power cut in the middle of an unsynced write would leave it.
func tearTails(t *testing.T, dataDir string) {
	t.Helper()
	for p := 0; p < partitions; p++ {
		dir := filepath.Join(dataDir, "topics", topic, strconv.Itoa(p))
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		if len(logs) == 0 {
			continue
		}
		sort.Strings(logs)
		f, err := os.OpenFile(logs[len(logs)-1], os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, 100+rand.IntN(200))
		for i := range junk {
			junk[i] = byte(rand.IntN(256))
		}
		junk[16] = 2 // looks like a v2 batch header
		f.Write(junk)
		f.Close()
	}
}

func TestKillNineKeepsAcknowledgedRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := kproc.Build(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	port := kproc.FreePort(t)

	var mu sync.Mutex
	ack := map[int32][]acked{}
	sent := map[string]bool{}
	seq := 0
	for round := 0; round < rounds; round++ {
		p := kproc.Start(t, bin, dataDir, port, segmentFlags...)
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.Addr), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(3*time.Second),
			kgo.ProducerLinger(0), kgo.RetryTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
				t.Fatalf("create topic: %v", err)
			}
			cancel()
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				v := fmt.Sprintf("r%d-%d", round, seq)
				seq++
				sent[v] = true
				mu.Unlock()
				cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
					if err != nil {
						return
					}
					mu.Lock()
					ack[r.Partition] = append(ack[r.Partition], acked{r.Offset, string(r.Value)})
					mu.Unlock()
				})
				if seq%64 == 0 {
					time.Sleep(time.Millisecond) // let batches form and acks flow
				}
			}
		}()
		// Let acknowledgements pile up, then kill without warning.
		// At most 10 s: the kill comes either way.
		_ = testwait.Until(10*time.Second, 5*time.Millisecond, func() error {
			mu.Lock()
			n := 0
			for _, a := range ack {
				n += len(a)
			}
			mu.Unlock()
			if n < (round+1)*500 {
				return fmt.Errorf("%d acknowledged", n)
			}
			return nil
		})
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
		p.Kill()
		cancel()
		wg.Wait()
		cl.Close()
		if round%2 == 1 {
			tearTails(t, dataDir)
		}
	}

	p := kproc.Start(t, bin, dataDir, port, segmentFlags...)
	defer p.Kill()
	verify(t, p.Addr, ack, sent)
	// The torn tails were found and cut, not served.
	logs, _ := os.ReadFile(filepath.Join(filepath.Dir(dataDir), "broker.log"))
	if !strings.Contains(string(logs), "partition_torn_tail_truncated") {
		t.Fatalf("no torn tail was recovered; broker log:\n%s", logs)
	}
}

// verify reads every partition from the start to its end and checks that each
// acknowledged record is at its offset with its value, offsets only grow, and every
// record served is one a producer sent.
func verify(t *testing.T, addr string, ack map[int32][]acked, sent map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]map[int64]string{}
	last := map[int32]int64{}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		got[o.Partition] = map[int64]string{}
		last[o.Partition] = -1
		remaining += int(o.Offset)
	})
	total := 0
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("timed out with %d records left", remaining)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last[r.Partition] {
				t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, last[r.Partition])
			}
			last[r.Partition] = r.Offset
			if !sent[string(r.Value)] {
				t.Fatalf("partition %d offset %d: garbage served: %q", r.Partition, r.Offset, r.Value)
			}
			got[r.Partition][r.Offset] = string(r.Value)
			remaining--
			total++
		})
	}
	n := 0
	for p, as := range ack {
		for _, a := range as {
			if got[p][a.offset] != a.value {
				t.Fatalf("partition %d offset %d: acknowledged %q, read %q", p, a.offset, a.value, got[p][a.offset])
			}
			n++
		}
	}
	t.Logf("%d acknowledged records over %d kills all present; %d records in the log", n, rounds, total)
}
