package txn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	kproc "kaas/e2e/proc"
)

// brokerKind picks what the scenarios run against: "kaas" (the built binary) or "fake"
// (franz-go's kfake in memory, the reference: a scenario that fails there is wrong).
var brokerKind = flag.String("txn.broker", "kaas", "kaas, or fake for franz-go's kfake")

const (
	inTopic    = "eos-in"
	outTopic   = "eos-out"
	partitions = 6
	group      = "eos"
)

// startBroker starts one broker and returns its address.
func startBroker(t *testing.T) string {
	t.Helper()
	if *brokerKind == "fake" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(kproc.FreePort(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()[0]
	}
	dir := t.TempDir()
	b := kproc.Start(t, kproc.Build(t), filepath.Join(dir, "data"), kproc.FreePort(t), "--log.level=warn")
	return b.Addr
}

func admin(t *testing.T, addr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// produceInput writes n records, key and value "i", acknowledged by all.
func produceInput(t *testing.T, addr string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(inTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatalf("produce input: %v", err)
	}
}

// ledger is what the members did, shared by them under mu.
type ledger struct {
	mu        sync.Mutex
	cond      *sync.Cond
	committed map[string]int // input key → commits of its transformed record
	aborted   map[string]int // input key → transformed records written in aborted transactions
	aborts    int
	errs      []error
}

func (l *ledger) fail(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.cond.Broadcast()
	l.mu.Unlock()
}

// waitCommitted waits until at least n distinct input keys are committed (or a member
// failed).
func (l *ledger) waitCommitted(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.committed) < n && len(l.errs) == 0 {
		l.cond.Wait()
	}
	if len(l.errs) > 0 {
		t.Fatalf("a member failed: %v", l.errs)
	}
}

// member is one consume-transform-produce process: a GroupTransactSession reading
// inTopic at read_committed, writing each record to outTopic and committing its offsets
// in the same transaction. Its every fifth transaction is aborted (and the records redone
// by whoever owns them next).
type member struct {
	name string
	sess *kgo.GroupTransactSession
	stop chan struct{}
	done chan struct{}
}

func startMember(t *testing.T, addr string, l *ledger, i int) *member {
	t.Helper()
	m := &member{name: "m" + strconv.Itoa(i), stop: make(chan struct{}), done: make(chan struct{})}
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(addr),
		kgo.TransactionalID("eos-"+m.name),
		kgo.TransactionTimeout(30*time.Second),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(inTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(10*time.Second),
		kgo.DefaultProduceTopic(outTopic),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	m.sess = sess
	go m.run(l)
	return m
}

func (m *member) run(l *ledger) {
	defer close(m.done)
	defer m.sess.Close()
	txns := 0
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		fs := m.sess.PollRecords(ctx, 40)
		cancel()
		if errs := fs.Errors(); len(errs) > 0 {
			for _, e := range errs {
				if !errors.Is(e.Err, context.DeadlineExceeded) && !errors.Is(e.Err, kgo.ErrClientClosed) {
					l.fail(fmt.Errorf("%s poll: %v", m.name, e.Err))
				}
			}
			continue
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := m.sess.Begin(); err != nil {
			l.fail(fmt.Errorf("%s begin: %v", m.name, err))
			return
		}
		var keys []string
		var produceErr error
		var mu sync.Mutex
		fs.EachRecord(func(r *kgo.Record) {
			keys = append(keys, string(r.Key))
			m.sess.Produce(context.Background(), &kgo.Record{Key: r.Key, Value: []byte(string(r.Value) + "|" + m.name)},
				func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						produceErr = err
						mu.Unlock()
					}
				})
		})
		// Every record is written before the transaction ends, so an aborted one is in
		// the log (read_uncommitted shows it) and the ledger knows which.
		if err := m.sess.Client().Flush(context.Background()); err != nil {
			l.fail(fmt.Errorf("%s flush: %v", m.name, err))
			return
		}
		mu.Lock()
		perr := produceErr
		mu.Unlock()
		if perr != nil {
			l.fail(fmt.Errorf("%s produce: %v", m.name, perr))
			return
		}
		txns++
		want := kgo.TransactionEndTry(txns%5 != 0)
		committed, err := m.sess.End(context.Background(), want)
		if err != nil {
			l.fail(fmt.Errorf("%s end: %v", m.name, err))
			return
		}
		l.mu.Lock()
		for _, k := range keys {
			if committed {
				l.committed[k]++
			} else {
				l.aborted[k]++
			}
		}
		if !committed {
			l.aborts++
		}
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

func (m *member) close() {
	close(m.stop)
	<-m.done
}

// readAll reads outTopic from the start to its end at the given isolation and returns
// each input key's count among the data records.
func readAll(t *testing.T, addr string, committed bool) map[string]int {
	t.Helper()
	ends, err := admin(t, addr).ListEndOffsets(context.Background(), outTopic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(outTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s (read_committed %v): partitions not read to their end: %v", outTopic, committed, want)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("read partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			got[string(r.Key)]++
		})
	}
	return got
}

// TestEOSPipeline runs consume-transform-produce with franz-go's GroupTransactSession:
// members over 6 partitions, a fourth joining and the first leaving mid-way, every fifth
// transaction of each member aborted and redone. read_committed output holds every input
// record exactly once, read_uncommitted shows exactly the aborted ones besides, and the
// group's offsets end at the input's end.
func TestEOSPipeline(t *testing.T) {
	const n = 3000
	addr := startBroker(t)
	adm := admin(t, addr)
	for _, topic := range []string{inTopic, outTopic} {
		if _, err := adm.CreateTopic(context.Background(), partitions, 1, nil, topic); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	}
	produceInput(t, addr, n)

	l := &ledger{committed: map[string]int{}, aborted: map[string]int{}}
	l.cond = sync.NewCond(&l.mu)
	members := []*member{startMember(t, addr, l, 0), startMember(t, addr, l, 1), startMember(t, addr, l, 2)}
	defer func() {
		for _, m := range members {
			if m != nil {
				m.close()
			}
		}
	}()
	l.waitCommitted(t, n/3)
	members = append(members, startMember(t, addr, l, 3))
	l.waitCommitted(t, 2*n/3)
	members[0].close()
	members[0] = nil
	l.waitCommitted(t, n)
	for i, m := range members {
		if m != nil {
			m.close()
			members[i] = nil
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		t.Fatalf("members failed: %v", l.errs)
	}
	if l.aborts == 0 {
		t.Fatal("no transaction was aborted: the scenario did not run its aborts")
	}
	var twice []string
	for k, c := range l.committed {
		if c != 1 {
			twice = append(twice, k+"×"+strconv.Itoa(c))
		}
	}
	if len(twice) > 0 {
		t.Fatalf("input records committed more than once: %s", strings.Join(twice, " "))
	}

	rc := readAll(t, addr, true)
	for i := 0; i < n; i++ {
		if k := strconv.Itoa(i); rc[k] != 1 {
			t.Errorf("read_committed: input %s seen %d times, want 1", k, rc[k])
		}
	}
	if len(rc) != n {
		t.Errorf("read_committed: %d distinct keys, want %d", len(rc), n)
	}
	ru := readAll(t, addr, false)
	for i := 0; i < n; i++ {
		k := strconv.Itoa(i)
		if want := 1 + l.aborted[k]; ru[k] != want {
			t.Errorf("read_uncommitted: input %s seen %d times, want %d (1 committed + %d aborted)", k, ru[k], want, l.aborted[k])
		}
	}

	inEnds, err := adm.ListEndOffsets(context.Background(), inTopic)
	if err != nil {
		t.Fatal(err)
	}
	fetched, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	inEnds.Each(func(o kadm.ListedOffset) {
		c, ok := fetched.Lookup(inTopic, o.Partition)
		if o.Offset > 0 && (!ok || c.At != o.Offset) {
			t.Errorf("group offset of %s[%d] = %d, want the input's end %d", inTopic, o.Partition, c.At, o.Offset)
		}
	})
	t.Logf("%d records, %d aborted transactions (%d records written and aborted)", n, l.aborts, sum(l.aborted))
}

func sum(m map[string]int) int {
	s := 0
	for _, v := range m {
		s += v
	}
	return s
}
