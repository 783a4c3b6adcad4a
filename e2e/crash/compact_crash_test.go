package crash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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

// keyOp is the newest acknowledged write of a key: its sequence number and whether it
// was a tombstone.
type keyOp struct {
	seq  int
	tomb bool
}

// sentOp is a write a producer sent.
type sentOp struct {
	key  string
	tomb bool
}

// brokerLine is the part of a broker log line the test reads.
type brokerLine struct {
	Message   string `json:"message"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	File      string `json:"file"`
}

// linesSince reads the broker log's JSON lines from byte offset from on.
func linesSince(t *testing.T, path string, from int64) []brokerLine {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if from > int64(len(raw)) {
		from = int64(len(raw))
	}
	var out []brokerLine
	sc := bufio.NewScanner(bytes.NewReader(raw[from:]))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l brokerLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// TestKillNineDuringCleaning runs the broker as a real process with a compacted topic
// whose cleaner runs all the time (small segments, min.cleanable.dirty.ratio 0.01,
// min.compaction.lag.ms 0, a retention check every 50 ms), overwrites keys and writes
// tombstones from a franz-go producer with acks=all, and kill -9s the broker at a random
// instant after a pass begins (the broker's partition_clean_started line), for several
// seeded rounds. After every restart a consumer from the start sees, for every key, a
// newest record no older than its newest acknowledged write (never a value a newer
// acknowledged write or tombstone replaced), offsets increasing, only records a producer
// sent; every .cleaned or .swap file the kill left was resolved at open
// (partition_cleaned_file_deleted, partition_cleaning_swap_completed). KAAS_CRASH_SEED
// replays a run.
func TestKillNineDuringCleaning(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	const (
		compacted = "compacted"
		parts     = 2
		keys      = 200
		rounds    = 12
	)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KAAS_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (KAAS_CRASH_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	bin := kproc.Build(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	port := kproc.FreePort(t)
	flags := []string{"--log.level=info", "--log.retention.check.interval.ms=50"}
	logPath := filepath.Join(filepath.Dir(dataDir), "broker.log")

	var mu sync.Mutex
	acked := map[string]keyOp{} // newest acknowledged write of each key
	sent := map[int]sentOp{}    // every write sent, by sequence number
	seq := 0
	padding := strings.Repeat("x", 180)

	partitionOf := func(key string) int32 {
		n, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
		return int32(n % parts)
	}
	leftovers := map[string]bool{} // "<partition>/<file>" a kill left behind
	midPass := 0                   // kills that left a pass's files behind

	for round := 0; round <= rounds; round++ {
		from := logSize(logPath)
		b := kproc.Start(t, bin, dataDir, port, flags...)
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.DefaultProduceTopic(compacted),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.RecordDeliveryTimeout(3*time.Second), kgo.RetryTimeout(3*time.Second), kgo.ProducerLinger(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := kadm.NewClient(cl).CreateTopic(ctx, parts, 1, map[string]*string{
				"cleanup.policy":            kadm.StringPtr("compact"),
				"segment.bytes":             kadm.StringPtr("16384"),
				"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
				"min.compaction.lag.ms":     kadm.StringPtr("0"),
				"delete.retention.ms":       kadm.StringPtr("2000"),
			}, compacted)
			cancel()
			if err != nil {
				t.Fatalf("create topic: %v", err)
			}
		} else {
			verifyCompacted(t, b.Addr, cl, compacted, parts, round, &mu, acked, sent)
			// Every file of a pass the kill interrupted was resolved when its log opened.
			resolved := map[string]bool{}
			for _, l := range linesSince(t, logPath, from) {
				if l.Topic == compacted && (l.Message == "partition_cleaned_file_deleted" || l.Message == "partition_cleaning_swap_completed") {
					resolved[fmt.Sprintf("%d/%s", l.Partition, l.File)] = true
				}
			}
			for f := range leftovers {
				if !resolved[f] {
					t.Fatalf("round %d: %s, left by the kill, was not resolved at open", round, f)
				}
			}
		}
		if round == rounds {
			cl.Close()
			b.Kill()
			break
		}

		// Overwrite keys and delete some, until a pass begins; kill at a random instant
		// after it.
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			prng := rand.New(rand.NewPCG(seed+uint64(round), 7))
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("k%03d", prng.IntN(keys))
				tomb := prng.IntN(10) == 0
				mu.Lock()
				s := seq
				seq++
				sent[s] = sentOp{key, tomb}
				mu.Unlock()
				r := &kgo.Record{Key: []byte(key), Partition: partitionOf(key),
					Headers: []kgo.RecordHeader{{Key: "seq", Value: []byte(strconv.Itoa(s))}}}
				if !tomb {
					r.Value = []byte(fmt.Sprintf("v%d-%s", s, padding))
				}
				cl.Produce(ctx, r, func(r *kgo.Record, err error) {
					if err != nil {
						return
					}
					mu.Lock()
					if cur, ok := acked[key]; !ok || cur.seq < s {
						acked[key] = keyOp{s, tomb}
					}
					mu.Unlock()
				})
				if i%32 == 31 {
					time.Sleep(time.Millisecond) // let acknowledgements flow
				}
			}
		}()
		want := 1 + rng.IntN(3) // the pass of this round to kill in
		err = testwait.Until(30*time.Second, 2*time.Millisecond, func() error {
			n := 0
			for _, l := range linesSince(t, logPath, from) {
				if l.Message == "partition_clean_started" && l.Topic == compacted {
					n++
				}
			}
			if n < want {
				return fmt.Errorf("%d passes begun, waiting for %d", n, want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		time.Sleep(time.Duration(rng.IntN(20_000)) * time.Microsecond)
		b.Kill()
		cancel()
		wg.Wait()
		cl.Close()

		clear(leftovers)
		for p := 0; p < parts; p++ {
			dir := filepath.Join(dataDir, "topics", compacted, strconv.Itoa(p))
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), ".cleaned") || strings.HasSuffix(e.Name(), ".swap") {
					leftovers[fmt.Sprintf("%d/%s", p, e.Name())] = true
				}
			}
		}
		if len(leftovers) > 0 {
			midPass++
		}
	}

	// Cleaning happened, and kills landed in the middle of passes.
	cleaned := 0
	for _, l := range linesSince(t, logPath, 0) {
		if l.Message == "partition_log_cleaned" && l.Topic == compacted {
			cleaned++
		}
	}
	if cleaned == 0 {
		t.Fatal("no compaction pass completed")
	}
	if midPass == 0 {
		t.Fatal("no kill landed in a pass (none left a .cleaned or .swap file)")
	}
	// With no cleaner running (a long retention check), no file of a pass is left.
	b := kproc.Start(t, bin, dataDir, port, "--log.level=info", "--log.retention.check.interval.ms=3600000")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	verifyCompacted(t, b.Addr, cl, compacted, parts, rounds+1, &mu, acked, sent)
	cl.Close()
	for p := 0; p < parts; p++ {
		entries, _ := os.ReadDir(filepath.Join(dataDir, "topics", compacted, strconv.Itoa(p)))
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".cleaned") || strings.HasSuffix(e.Name(), ".swap") {
				t.Fatalf("partition %d: %s left after recovery", p, e.Name())
			}
		}
	}
	b.Kill()
	t.Logf("%d writes sent, %d keys; %d passes completed; %d of %d kills left a pass's files behind", seq, len(acked), cleaned, midPass, rounds)
}

// verifyCompacted writes an end marker to each partition, reads every partition from the
// start to its marker, and checks offsets increase, every record is one a producer sent,
// and each key's newest record is no older than its newest acknowledged write (a
// tombstone's key may also be gone, once delete.retention.ms has passed). cl writes the
// markers; a consumer of its own reads from addr.
func verifyCompacted(t *testing.T, addr string, cl *kgo.Client, topic string, parts, round int, mu *sync.Mutex, acked map[string]keyOp, sent map[int]sentOp) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends := map[int32]int64{}
	for p := int32(0); p < int32(parts); p++ {
		key := fmt.Sprintf("end-%d", p)
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Value: []byte(strconv.Itoa(round))}).First()
		if err != nil {
			t.Fatalf("round %d: end marker of partition %d: %v", round, p, err)
		}
		ends[p] = r.Offset
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	last := map[int32]int64{}
	newest := map[string]int{} // newest sequence read per key (-1: none)
	newestTomb := map[string]bool{}
	for p := range ends {
		last[p] = -1
	}
	done := 0
	for done < parts {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("round %d: timed out reading to the end markers (read to %v, markers at %v)", round, last, ends)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("round %d: fetch partition %d: %v", round, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last[r.Partition] {
				t.Fatalf("round %d: partition %d: offset %d after %d", round, r.Partition, r.Offset, last[r.Partition])
			}
			last[r.Partition] = r.Offset
			if r.Offset == ends[r.Partition] {
				done++
			}
			if strings.HasPrefix(string(r.Key), "end-") {
				return
			}
			var s = -1
			for _, h := range r.Headers {
				if h.Key == "seq" {
					s, _ = strconv.Atoi(string(h.Value))
				}
			}
			mu.Lock()
			op, ok := sent[s]
			mu.Unlock()
			if !ok || op.key != string(r.Key) || op.tomb != (r.Value == nil) {
				t.Fatalf("round %d: partition %d offset %d: a record no producer sent (key %q, seq %d)", round, r.Partition, r.Offset, r.Key, s)
			}
			newest[op.key] = s
			newestTomb[op.key] = op.tomb
		})
	}
	mu.Lock()
	defer mu.Unlock()
	// A tombstone sent after the newest acknowledged write may have been written though
	// not acknowledged (the kill), and gone since with its key.
	tombAfter := map[string]int{}
	for s, op := range sent {
		if op.tomb && s > tombAfter[op.key] {
			tombAfter[op.key] = s
		}
	}
	for key, a := range acked {
		got, ok := newest[key]
		switch {
		case !ok && (a.tomb || tombAfter[key] > a.seq):
			// deleted, and its tombstone gone after delete.retention.ms
		case !ok:
			t.Fatalf("round %d: key %s: acknowledged value %d lost", round, key, a.seq)
		case got < a.seq:
			t.Fatalf("round %d: key %s: newest record is write %d (tombstone %v), but %d (tombstone %v) was acknowledged", round, key, got, newestTomb[key], a.seq, a.tomb)
		}
	}
}
