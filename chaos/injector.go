package chaos

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/conn"
	"kaas/storage"
)

// Kind is one kind of fault.
type Kind string

// The faults the injector makes.
const (
	Panic         Kind = "panic"          // a panic in an actor's Receive
	Delay         Kind = "delay"          // a pause before an actor handles a message
	TimerLate     Kind = "timer_late"     // a timer firing later than armed
	TimerTwice    Kind = "timer_twice"    // a timer firing twice
	DiskFail      Kind = "disk_fail"      // a failed write, fsync, rename or segment read (EIO)
	DiskSlow      Kind = "disk_slow"      // a slow write, fsync, rename or segment read
	ResetRequest  Kind = "reset_request"  // connection reset with a request read, unhandled
	ResetResponse Kind = "reset_response" // connection reset with a response half written
	Retriable     Kind = "retriable"      // a request answered with a retriable error
)

// Kinds lists every kind, in report order.
var Kinds = []Kind{Panic, Delay, TimerLate, TimerTwice, DiskFail, DiskSlow, ResetRequest, ResetResponse, Retriable}

// Rates are the chances, per site visit, that a fault of each kind fires (0..1).
type Rates map[Kind]float64

// DefaultRates keep a run busy with faults and still let clients make progress.
func DefaultRates() Rates {
	return Rates{
		Panic: 0.004, Delay: 0.01, TimerLate: 0.05, TimerTwice: 0.05,
		DiskFail: 0.01, DiskSlow: 0.02,
		ResetRequest: 0.003, ResetResponse: 0.003, Retriable: 0.01,
	}
}

// Fired is one fault as it fired: the n-th visit of site (counted from 0).
type Fired struct {
	Site   string
	N      uint64
	Kind   Kind
	Detail string
	At     time.Duration // since the injector started
}

func (f Fired) String() string {
	s := fmt.Sprintf("%s#%d %s", f.Site, f.N, f.Kind)
	if f.Detail != "" {
		s += " " + f.Detail
	}
	return s
}

// Injector decides, from one seed, which visits of which fault sites fail and how. A
// site is a place and the kind of thing passing it (an actor kind and message type, a
// timer's message type, a storage step and file kind, an API); each site draws from a
// PCG stream of its own, seeded from the seed and the site's name, two values per visit.
// So the n-th visit of a site gets the same decision under the same seed whatever the
// interleaving of sites: a seed replays its schedule as far as the visits repeat. What
// fired is recorded as it fires (Schedule).
type Injector struct {
	seed  uint64
	rates Rates
	// MaxPanics bounds panics per actor kind in a run, and PanicGap spaces them: the
	// supervisors stop an actor that fails more than ten times in ten seconds, by
	// design, and a run checks recovery, not that limit.
	MaxPanics int
	PanicGap  time.Duration
	// Kinds enabled; nil: all.
	only map[Kind]bool

	start time.Time
	on    atomic.Bool

	mu        sync.Mutex
	sites     map[string]*site
	fired     []Fired
	panics    map[string]int
	lastPanic map[string]time.Time
	types     sync.Map // reflect.Type -> actor kind ("" when not a target)
}

type site struct {
	r *rand.Rand
	n uint64
}

// New makes an injector for seed with rates (DefaultRates when nil); it is off until On.
func New(seed uint64, rates Rates, kinds ...Kind) *Injector {
	if rates == nil {
		rates = DefaultRates()
	}
	in := &Injector{seed: seed, rates: rates, MaxPanics: 3, PanicGap: time.Second,
		sites: map[string]*site{}, panics: map[string]int{}, lastPanic: map[string]time.Time{}, start: time.Now()}
	if len(kinds) > 0 {
		in.only = map[Kind]bool{}
		for _, k := range kinds {
			in.only[k] = true
		}
	}
	return in
}

// Seed is the injector's seed.
func (in *Injector) Seed() uint64 { return in.seed }

// On starts injecting; Off stops (the hooks stay installed and pass everything).
func (in *Injector) On()  { in.on.Store(true) }
func (in *Injector) Off() { in.on.Store(false) }

// Install puts the injector in the actor layer's, the storage layer's and the
// connections' hooks, with rec (may be nil) seeing every request and response, and
// returns what takes them out again.
func (in *Injector) Install(rec *Recorder) (uninstall func()) {
	a := actor.SetFaults(actorFaults{in})
	s := storage.SetHook(in.disk)
	c := conn.SetIntercept(&intercept{in: in, rec: rec})
	return func() { c(); s(); a() }
}

// visit draws the decision of the next visit of name: which kind fires (or ""), and a
// value in [0,1) for its details. kinds are the site's candidate kinds, in a fixed order.
func (in *Injector) visit(name string, kinds ...Kind) (Kind, uint64, float64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.sites[name]
	if s == nil {
		h := fnv.New64a()
		h.Write([]byte(name))
		s = &site{r: rand.New(rand.NewPCG(in.seed, h.Sum64()))}
		in.sites[name] = s
	}
	n := s.n
	s.n++
	p, v := s.r.Float64(), s.r.Float64()
	for _, k := range kinds {
		if in.only != nil && !in.only[k] {
			continue
		}
		if p < in.rates[k] {
			return k, n, v
		}
		p -= in.rates[k]
	}
	return "", n, v
}

func (in *Injector) record(f Fired) {
	f.At = time.Since(in.start)
	in.mu.Lock()
	in.fired = append(in.fired, f)
	in.mu.Unlock()
}

// Schedule is every fault that fired, in firing order.
func (in *Injector) Schedule() []Fired {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Fired(nil), in.fired...)
}

// Counts are the faults fired by kind.
func (in *Injector) Counts() map[Kind]int {
	out := map[Kind]int{}
	for _, f := range in.Schedule() {
		out[f.Kind]++
	}
	return out
}

// Panics are the panics fired by actor kind.
func (in *Injector) Panics() map[string]int {
	out := map[string]int{}
	for _, f := range in.Schedule() {
		if f.Kind == Panic {
			out[strings.Split(f.Site, "/")[1]]++
		}
	}
	return out
}

// Report is the seed, the counts and the schedule, for a failing run's log: the
// schedule sorted by site and visit, the order a replay compares.
func (in *Injector) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos seed %d (replay: go test ./chaos -run TestChaos -chaos.seed=%d)\n", in.seed, in.seed)
	c := in.Counts()
	for _, k := range Kinds {
		fmt.Fprintf(&b, "  %s: %d\n", k, c[k])
	}
	s := in.Schedule()
	sort.SliceStable(s, func(i, j int) bool { return s[i].At < s[j].At })
	b.WriteString("schedule (firing order):\n")
	for _, f := range s {
		fmt.Fprintf(&b, "  %8.3fs %s\n", f.At.Seconds(), f)
	}
	return b.String()
}

// actorKind names the actors that take faults: group, offsets, journal (the offsets
// journal), txn_journal (the transaction coordinator's, another instance of the same
// actor), transaction (one transactional id's coordinator), partition, connection; ""
// for the rest (managers, gathers).
func (in *Injector) actorKind(a actor.Actor) string {
	t := reflect.TypeOf(a)
	if k, ok := in.types.Load(t); ok {
		return k.(string)
	}
	if j, ok := a.(interface{ JournalName() string }); ok {
		// Two journals of one type: told apart by name, never cached by type.
		if j.JournalName() == "transactions_journal" {
			return "txn_journal"
		}
		return "journal"
	}
	k := ""
	switch t.String() {
	case "*group.groupActor":
		k = "group"
	case "*offsets.offsetsActor":
		k = "offsets"
	case "*txn.txnActor":
		k = "transaction"
	case "*partition.partitionActor":
		k = "partition"
	case "*conn.connActor":
		k = "connection"
	}
	in.types.Store(t, k)
	return k
}

type actorFaults struct{ in *Injector }

func (f actorFaults) Receive(a actor.Actor, msg any) bool {
	in := f.in
	if !in.on.Load() {
		return false
	}
	kind := in.actorKind(a)
	if kind == "" {
		return false
	}
	name := "receive/" + kind + "/" + typeName(msg)
	k, n, v := in.visit(name, Panic, Delay)
	switch k {
	case Panic:
		in.mu.Lock()
		now := time.Now()
		over := in.panics[kind] >= in.MaxPanics || now.Sub(in.lastPanic[kind]) < in.PanicGap
		if !over {
			in.panics[kind]++
			in.lastPanic[kind] = now
		}
		in.mu.Unlock()
		if over {
			return false
		}
		in.record(Fired{Site: name, N: n, Kind: Panic})
		return true
	case Delay:
		d := time.Duration(1+v*20) * time.Millisecond
		in.record(Fired{Site: name, N: n, Kind: Delay, Detail: d.String()})
		time.Sleep(d)
	}
	return false
}

func (f actorFaults) Timer(msg any, d time.Duration) (time.Duration, bool) {
	in := f.in
	if !in.on.Load() {
		return d, false
	}
	name := "timer/" + typeName(msg)
	k, n, v := in.visit(name, TimerLate, TimerTwice)
	switch k {
	case TimerLate:
		late := time.Duration(v*float64(d)/2) + time.Millisecond
		in.record(Fired{Site: name, N: n, Kind: TimerLate, Detail: "+" + late.String()})
		return d + late, false
	case TimerTwice:
		in.record(Fired{Site: name, N: n, Kind: TimerTwice})
		return d, true
	}
	return d, false
}

// fileKind names what a path under data.dir holds.
func fileKind(path string) string {
	name := strings.TrimSuffix(filepath.Base(path), storage.TmpSuffix)
	switch {
	case strings.Contains(path, "__offsets_journal"):
		return "journal"
	case strings.Contains(path, "__consumer_offsets"):
		return "group_file"
	case strings.Contains(path, "__cluster"):
		return "cluster"
	case under(path, "transactions", "journal"):
		return "txn_journal" // the transaction coordinator's journal
	case under(path, "transactions", "ids"):
		return "txn_id" // a transactional id's file
	case strings.HasSuffix(name, ".txnindex"):
		return "txnindex" // a segment's aborted-transaction index
	case strings.HasSuffix(name, ".log"):
		return "log" // a partition segment
	case name == "recovery-point":
		return "recovery_point"
	case name == "leader-epochs.json":
		return "leader_epochs"
	case name == "log-start-offset":
		return "log_start_offset"
	case name == "leader.lock":
		return "leader_lock"
	default:
		return "catalog" // topic.json, producer ids
	}
}

// under: path is the directory data.dir/elems... or is in it (a directory's own fsync
// names the directory).
func under(path string, elems ...string) bool {
	sep := string(filepath.Separator)
	return strings.Contains(path+sep, sep+strings.Join(elems, sep)+sep)
}

// disk is the storage hook: writes, fsyncs and renames of every file kind, and reads of
// partition segments (a fetch, a recovery), may fail (EIO) or be slow.
func (in *Injector) disk(op storage.Op, path string) error {
	if !in.on.Load() {
		return nil
	}
	kind := fileKind(path)
	switch {
	case op == storage.OpWrite, op == storage.OpSync, op == storage.OpRename:
	case op == storage.OpRead && kind == "log":
	default:
		return nil
	}
	name := "disk/" + string(op) + "/" + kind
	k, n, v := in.visit(name, DiskFail, DiskSlow)
	switch k {
	case DiskFail:
		in.record(Fired{Site: name, N: n, Kind: DiskFail, Detail: "EIO"})
		return syscall.EIO
	case DiskSlow:
		d := time.Duration(1+v*50) * time.Millisecond
		in.record(Fired{Site: name, N: n, Kind: DiskSlow, Detail: d.String()})
		time.Sleep(d)
	}
	return nil
}

// retriableCode is the error an API is answered with under a Retriable fault: a code
// the client must retry (after finding the coordinator again, for NOT_COORDINATOR).
func retriableCode(key int16, v float64) (int16, bool) {
	switch key {
	case 0: // Produce
		return kerr.NotLeaderForPartition.Code, true
	case 8, 9, 11, 12, 14: // OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, SyncGroup
		codes := []int16{kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code}
		return codes[int(v*float64(len(codes)))%len(codes)], true
	}
	return 0, false
}

// intercept is the connections' hook: it passes each request and response to the
// recorder and decides the request's fault.
type intercept struct {
	in  *Injector
	rec *Recorder
}

func (i *intercept) Request(cn string, c *conn.Call) conn.Action {
	if i.rec != nil {
		i.rec.request(cn, c)
	}
	in := i.in
	if !in.on.Load() {
		return conn.Action{}
	}
	if c.Key == 18 { // ApiVersions: clients start every connection with it
		return conn.Action{}
	}
	name := "conn/" + kmsg.NameForKey(c.Key)
	k, n, v := in.visit(name, ResetRequest, ResetResponse, Retriable)
	switch k {
	case ResetRequest:
		in.record(Fired{Site: name, N: n, Kind: ResetRequest})
		return conn.Action{Kind: conn.ResetRequest}
	case ResetResponse:
		in.record(Fired{Site: name, N: n, Kind: ResetResponse})
		return conn.Action{Kind: conn.ResetResponse}
	case Retriable:
		code, ok := retriableCode(c.Key, v)
		if !ok || (c.Key == 9 && c.Version < 2) {
			return conn.Action{}
		}
		in.record(Fired{Site: name, N: n, Kind: Retriable, Detail: kerr.ErrorForCode(code).Error()})
		if i.rec != nil {
			i.rec.injectedCode(c.Key, code)
		}
		return conn.Action{Kind: conn.Retriable, Code: code}
	}
	return conn.Action{}
}

func (i *intercept) Response(cn string, c *conn.Call, resp kmsg.Response) {
	if i.rec != nil {
		i.rec.response(cn, c, resp)
	}
}

func (i *intercept) Closed(cn string) {
	if i.rec != nil {
		i.rec.closed(cn)
	}
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
