package txn

import (
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/offsets"
	"kaas/logs"
	"kaas/storage"
)

// ManagerConfig is everything the transactions manager needs.
type ManagerConfig struct {
	// Replayed is Replay's result: every id's state, started before anything is served.
	Replayed *Replayed
	// Journal is the coordinator's journal actor (its own instance, under JournalDir).
	Journal  *actor.PID
	FS       storage.FS
	Dir      string // IDsDir
	Settings Settings
	Sides    Sides
	Topics   *actor.PID
	Log      zerolog.Logger
	Now      func() time.Time
	// Metrics, when set, get the open transactions and the oldest one's age.
	Metrics *Metrics
	// Resumes, when set, counts id actors resumed after a panic in their Receive.
	Resumes prometheus.Counter
	// Owns, in a cluster, says whether this broker coordinates an id now (the
	// ownership controller's state in force): the others get NOT_COORDINATOR. Nil: a
	// broker alone, every id.
	Owns func(id string) bool
	// Gate, in a cluster, makes each id actor's gate when it starts (cluster.go): the
	// lease held then must still be held for anything to be written.
	Gate func() func() bool
}

// ManagerProps makes the transactions manager: it routes every per-id request to the
// id's actor (its child, named after the quoted id and a generation), spawns one for an
// InitProducerId of an unknown id and one for every replayed id as it starts, answers
// Describe and List, and keeps the metrics. A panicking id actor resumes with its state
// (ResumeChildren): a fresh one could not rebuild it.
func ManagerProps(cfg ManagerConfig) *actor.Props {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FS == nil {
		cfg.FS = storage.OSFS{}
	}
	log := cfg.Log.With().Str("actor", "transactions").Logger()
	strategy := actor.ResumeChildren(func(reason any) {
		log.Error().Interface("reason", reason).Msg("transaction_actor_failed_resuming")
		if cfg.Resumes != nil {
			cfg.Resumes.Inc()
		}
	})
	return actor.PropsOf(func() actor.Actor { return &manager{cfg: cfg, log: log} }, actor.WithSupervisor(strategy))
}

type entry struct {
	id       string
	pid      *actor.PID
	sum      summary
	stopping bool      // expired or released: requests wait for it to be gone, then are routed again
	queue    []request // while stopping
}

type manager struct {
	cfg ManagerConfig
	log zerolog.Logger

	ids   map[string]*entry
	byPID map[string]*entry
	// byProducer finds the id that holds a producer id (AdminAbort, CheckTxn).
	byProducer map[int64]*entry
	gen        uint64
	ops        actor.Pending[func(any)]
	tick       actor.Cancel
	closing    bool
	// In a cluster (cluster.go): the released actors not stopped yet (by PID id), the
	// releases waiting for them, and the id files the last Load could not read.
	releasing      map[string]bool
	releaseReplies []actor.Promise
	unreadable     map[string]bool
	refusedLogged  map[string]bool
}

type metricsTick struct{ actor.Tick }

// metricsEvery is how often the open-transaction metrics are refreshed.
const metricsEvery = 5 * time.Second

func (mg *manager) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		mg.onStarted(ctx)
	case *actor.Stopping:
		mg.closing = true
		if mg.tick != nil {
			mg.tick()
		}
		for _, e := range mg.ids {
			for _, r := range e.queue {
				r.fail(codeNotCoord)
			}
			e.queue = nil
		}
	case request:
		mg.route(ctx, m)
	case *AddPartitionsBatch:
		mg.handleBatch(ctx, m)
	case *Describe:
		mg.handleDescribe(ctx, m)
	case *List:
		mg.handleList(m)
	case *AdminAbort:
		mg.handleAdminAbort(ctx, m)
	case *CheckTxn:
		mg.handleCheck(ctx, m)
	case *summary:
		if e := mg.ids[m.id]; e != nil {
			mg.indexProducer(e, m.pid)
			e.sum = *m
			if m.state == Dead {
				e.stopping = true
				mg.unindexProducer(e)
			}
		}
	case *actor.Terminated:
		mg.onTerminated(ctx, m)
	case *Load:
		mg.handleLoad(ctx, m)
	case *loaded:
		mg.onLoaded(ctx, m)
	case *Release:
		mg.handleRelease(ctx, m)
	case *actor.Settled:
		if then, ok := mg.ops.Take(m); ok {
			then(m.Value)
		}
	case *metricsTick:
		mg.refreshMetrics()
	}
}

func (mg *manager) onStarted(ctx actor.Context) {
	mg.ids = map[string]*entry{}
	mg.byPID = map[string]*entry{}
	mg.byProducer = map[int64]*entry{}
	mg.releasing = map[string]bool{}
	mg.refusedLogged = map[string]bool{}
	if r := mg.cfg.Replayed; r != nil {
		mg.unreadable = r.Unreadable
		ids := make([]string, 0, len(r.States))
		for id := range r.States {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if _, err := mg.spawn(ctx, id, r.States[id]); err != nil {
				mg.log.Error().Err(err).Str("transactional_id", logs.ID(id)).Msg("transaction_actor_not_started")
			}
		}
	}
	if mg.cfg.Metrics != nil {
		mg.tick = actor.Every(ctx, metricsEvery, &metricsTick{})
	}
}

func (mg *manager) spawn(ctx actor.Context, id string, m *Meta) (*entry, error) {
	mg.gen++
	var gate func() bool
	if mg.cfg.Gate != nil {
		gate = mg.cfg.Gate()
	}
	props := Props(Config{
		ID: id, Meta: m, Journal: mg.cfg.Journal, FS: mg.cfg.FS, Dir: mg.cfg.Dir, Settings: mg.cfg.Settings,
		Sides: mg.cfg.Sides, Topics: mg.cfg.Topics, Log: mg.cfg.Log, Now: mg.cfg.Now, Metrics: mg.cfg.Metrics, Gate: gate,
	})
	// Quoted, with a generation: an expired id's actor may still be stopping when the
	// id comes back.
	pid, err := actor.SpawnNamed(ctx, props, strconv.Quote(id)+"/"+strconv.FormatUint(mg.gen, 10))
	if err != nil {
		return nil, err
	}
	ctx.Watch(pid)
	e := &entry{id: id, pid: pid, sum: summary{id: id, pid: noPID, state: Empty, startMs: -1}}
	if m != nil {
		e.sum = summary{id: id, pid: m.ProducerID, state: m.State, startMs: m.StartMs}
	}
	mg.ids[id] = e
	mg.byPID[pid.Id] = e
	if e.sum.state != Dead {
		mg.indexProducer(e, e.sum.pid)
	}
	return e, nil
}

func (mg *manager) route(ctx actor.Context, r request) {
	id := r.txnID()
	if mg.cfg.Owns != nil && !mg.cfg.Owns(id) {
		r.fail(codeNotCoord)
		return
	}
	e := mg.ids[id]
	if name := offsets.FileName(id); e == nil && mg.unreadable[name] {
		// Its file could not be read: starting afresh would forget its producer and
		// an undecided transaction. Refused until a Load reads it (logged once).
		if !mg.refusedLogged[name] {
			mg.refusedLogged[name] = true
			mg.log.Warn().Str("transactional_id", logs.ID(id)).Msg("transactional_id_refused_file_unreadable")
		}
		r.fail(codeNotAvailable)
		return
	}
	if e == nil {
		if _, ok := r.(*InitProducerID); !ok {
			// Nothing runs for an id the coordinator does not know (Apache:
			// INVALID_PRODUCER_ID_MAPPING for every producer request).
			r.fail(codeMapping)
			return
		}
		var err error
		if e, err = mg.spawn(ctx, id, nil); err != nil {
			mg.log.Error().Err(err).Str("transactional_id", logs.ID(id)).Msg("transaction_actor_not_started")
			r.fail(codeNotAvailable)
			return
		}
	}
	if e.stopping {
		if len(e.queue) >= maxQueued {
			r.fail(codeConcurrent)
			return
		}
		e.queue = append(e.queue, r)
		return
	}
	ctx.Send(e.pid, r)
}

func (mg *manager) onTerminated(ctx actor.Context, m *actor.Terminated) {
	e := mg.byPID[m.Who.Id]
	if e == nil {
		return
	}
	delete(mg.byPID, m.Who.Id)
	if mg.releasing[m.Who.Id] {
		delete(mg.releasing, m.Who.Id)
		defer mg.releaseSettled()
	}
	mg.unindexProducer(e)
	if mg.ids[e.id] == e {
		delete(mg.ids, e.id)
	}
	if !e.stopping && !mg.closing {
		mg.log.Error().Str("transactional_id", logs.ID(e.id)).Msg("transaction_actor_stopped")
	}
	for _, r := range e.queue {
		mg.route(ctx, r)
	}
}

// handleBatch routes each request of b, gathering their answers.
func (mg *manager) handleBatch(ctx actor.Context, b *AddPartitionsBatch) {
	reqs := b.Requests
	ps := actor.Gather(ctx, len(reqs), 30*time.Second, nil, func(i int) any {
		return &PartitionsVerified{Codes: allCodes(reqs[i].Partitions, codeNotAvailable)}
	}, func(res []any) { b.Reply.Resolve(res) })
	for i, r := range reqs {
		c := *r
		c.Reply = ps[i]
		mg.route(ctx, &c)
	}
}

// handleDescribe asks each named id's actor, all at once.
func (mg *manager) handleDescribe(ctx actor.Context, d *Describe) {
	out := make([]Description, len(d.IDs))
	var ask []int
	for i, id := range d.IDs {
		if mg.cfg.Owns != nil && !mg.cfg.Owns(id) {
			out[i] = Description{ID: id, ErrorCode: kerr.NotCoordinator.Code}
			continue
		}
		if e := mg.ids[id]; e != nil && !e.stopping {
			ask = append(ask, i)
			continue
		}
		out[i] = Description{ID: id, ErrorCode: kerr.TransactionalIDNotFound.Code}
	}
	ps := actor.Gather(ctx, len(ask), 10*time.Second, nil, func(int) any { return nil }, func(res []any) {
		for j, i := range ask {
			if v, ok := res[j].(Description); ok {
				out[i] = v
			} else {
				out[i] = Description{ID: d.IDs[i], ErrorCode: kerr.CoordinatorNotAvailable.Code}
			}
		}
		d.Reply.Resolve(&Described{Txns: out})
	})
	for j, i := range ask {
		ctx.Send(mg.ids[d.IDs[i]].pid, &describeOne{reply: ps[j]})
	}
}

// handleList answers from the summaries the id actors send after each transition.
func (mg *manager) handleList(l *List) {
	states := map[State]bool{}
	var unknown []string
	for _, s := range l.States {
		if st, ok := ParseState(s); ok {
			states[st] = true
		} else {
			unknown = append(unknown, s)
		}
	}
	pids := map[int64]bool{}
	for _, p := range l.ProducerIDs {
		pids[p] = true
	}
	now := mg.cfg.Now().UnixMilli()
	out := &Listed{UnknownStates: unknown}
	if len(unknown) > 0 && len(states) == 0 {
		// Apache: a filter naming only unknown states matches nothing.
		l.Reply.Resolve(out)
		return
	}
	for _, e := range mg.ids {
		s := e.sum
		if s.pid == noPID || s.state == Dead {
			continue
		}
		if len(states) > 0 && !states[s.state] {
			continue
		}
		if len(pids) > 0 && !pids[s.pid] {
			continue
		}
		// KIP-994: only transactions running longer than that. Apache compares the last
		// start time of any state; kaas lists running transactions only, which is
		// what the filter is for (finding hanging ones).
		if l.MinDurationMs >= 0 && (!s.state.open() || s.startMs < 0 || now-s.startMs <= l.MinDurationMs) {
			continue
		}
		out.Txns = append(out.Txns, Listing{ID: s.id, ProducerID: s.pid, State: s.state})
	}
	sort.Slice(out.Txns, func(i, j int) bool { return out.Txns[i].ID < out.Txns[j].ID })
	l.Reply.Resolve(out)
}

func (mg *manager) refreshMetrics() {
	now := mg.cfg.Now().UnixMilli()
	open, oldest := 0, int64(-1)
	for _, e := range mg.ids {
		if e.sum.state.open() {
			open++
			if e.sum.startMs >= 0 && (oldest < 0 || e.sum.startMs < oldest) {
				oldest = e.sum.startMs
			}
		}
	}
	age := 0.0
	if oldest >= 0 {
		age = float64(now-oldest) / 1000
	}
	mg.cfg.Metrics.set(open, age, len(mg.ids))
}
