package actor

import (
	"sync"
	"sync/atomic"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/extensions"
)

// idleWorker is how long a mailbox goroutine waits for another turn before it exits, and
// maxIdle how many may wait at once (a burst of turns does not leave thousands behind).
const (
	idleWorker = time.Second
	maxIdle    = 256
)

// dispatcher runs mailbox turns (protoactor's Dispatcher) on goroutines that outlive
// them: a turn goes to a goroutine left idle by an earlier one where one is waiting, and a
// new goroutine starts only when none is. protoactor's own dispatcher starts a goroutine
// for every turn, and each grew its stack again through the actor's call chain: with 256
// committers over 64 groups that stack copying was a fifth of the broker's CPU time.
// There is no fixed pool, so an actor that blocks (the offsets journal in fdatasync)
// never holds up another. One dispatcher per System, so the goroutines of a system made
// in a testing/synctest bubble stay in it.
type dispatcher struct {
	work chan func()
	done chan struct{}
	once sync.Once
	idle atomic.Int32
	// kinds: the protoactor props of each kind of actor spawned in the system
	// (kindProps), guarded by spawnMu.
	kinds map[options]*pa.Props
	// halted: halt was called, and no turn starts any more. turns counts the turns
	// running, so that halt can wait for them to end.
	halted atomic.Bool
	turns  atomic.Int32
}

// throughput is how many messages a mailbox turn handles before it yields (protoactor's
// default).
const throughput = 300

func newDispatcher() *dispatcher {
	return &dispatcher{work: make(chan func()), done: make(chan struct{})}
}

func (d *dispatcher) Schedule(fn func()) {
	if d.halted.Load() {
		return
	}
	select {
	case d.work <- fn:
	default:
		go d.worker(fn)
	}
}

func (d *dispatcher) Throughput() int { return throughput }

func (d *dispatcher) worker(fn func()) {
	t := time.NewTimer(idleWorker)
	defer t.Stop()
	for {
		d.run(fn)
		if d.idle.Add(1) > maxIdle {
			d.idle.Add(-1)
			return
		}
		t.Reset(idleWorker)
		select {
		case fn = <-d.work:
			d.idle.Add(-1)
		case <-t.C:
			d.idle.Add(-1)
			return
		case <-d.done:
			d.idle.Add(-1)
			return
		}
	}
}

// run runs one turn, unless the dispatcher is halted. The count is taken before the
// halted flag is read, and halt sets the flag before it reads the count, so a turn that
// starts is always one halt waits for.
func (d *dispatcher) run(fn func()) {
	d.turns.Add(1)
	defer d.turns.Add(-1)
	if !d.halted.Load() {
		fn()
	}
}

// halt makes every turn not yet started never run (its mailbox keeps its messages and is
// never scheduled again), then waits up to wait for the turns running to end. It reports
// whether they all did.
func (d *dispatcher) halt(wait time.Duration) bool {
	d.halted.Store(true)
	deadline := time.Now().Add(wait)
	for d.turns.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(haltPoll)
	}
	return true
}

// haltPoll is how often halt looks whether the running turns have ended.
const haltPoll = time.Millisecond

// close lets idle goroutines go at once; turns scheduled later still run.
func (d *dispatcher) close() { d.once.Do(func() { close(d.done) }) }

// dispatcherExtension is where a System's dispatcher is registered among its protoactor
// system's extensions (NewSystem, before anything is spawned).
var dispatcherExtension = extensions.NextExtensionID()

func (d *dispatcher) ExtensionID() extensions.ExtensionID { return dispatcherExtension }

// spawnMu serializes spawns through this package, and spawning is the producer of the
// actor being spawned under it: protoactor's spawn runs the shared props' OnInit (kindProps)
// synchronously, before the actor's first message, and that hands the producer to the
// actor's adapter. Spawns are rare beside messages; nothing under the lock waits for an
// actor (the new actor's Started runs on a dispatcher goroutine).
var (
	spawnMu  sync.Mutex
	spawning func() Actor
)

// spawn starts the actor of props through do, which spawns the protoactor props it is
// given: those shared by every actor of props' kind in sys.
func spawn(sys *pa.ActorSystem, props *Props, do func(*pa.Props) (*PID, error)) (*PID, error) {
	spawnMu.Lock()
	defer spawnMu.Unlock()
	spawning = props.produce
	defer func() { spawning = nil }()
	return do(kindProps(sys, props.o))
}

// kindProps is the protoactor props of every actor with options o in sys, made at the
// first spawn of such an actor and kept by sys's dispatcher. Called with spawnMu held.
// Its producer makes an empty adapter, which builds its actor at its first message with
// the producer OnInit handed it (reborn.go carries that producer across a restart).
// Options hold the strategies themselves: a kind is one set of strategy values, so a
// strategy must be made once per kind (per manager, per broker), not per actor.
func kindProps(sys *pa.ActorSystem, o options) *pa.Props {
	d, _ := sys.Extensions.Get(dispatcherExtension).(*dispatcher)
	if d != nil {
		if pp := d.kinds[o]; pp != nil {
			return pp
		}
	}
	popts := []pa.PropsOption{
		pa.WithOnInit(func(c pa.Context) { c.Actor().(*adapter).produce = spawning }),
		// The lock-free mailbox: two node queues, where protoactor's default also keeps a
		// ring of ten slots behind a mutex (about 200 bytes more per actor, and a ring
		// that never shrinks after a burst).
		pa.WithMailbox(pa.UnboundedLockfree()),
	}
	if o.supervisor != nil {
		popts = append(popts, pa.WithSupervisor(o.supervisor))
	}
	if o.guardian != nil {
		popts = append(popts, pa.WithGuardian(o.guardian))
	}
	if d == nil {
		// A system not made by NewSystem: protoactor's dispatcher, and nothing kept.
		return pa.PropsFromProducer(func() pa.Actor { return &adapter{} }, popts...)
	}
	popts = append(popts, pa.WithDispatcher(d))
	pp := pa.PropsFromProducer(func() pa.Actor { return &adapter{} }, popts...)
	if d.kinds == nil {
		d.kinds = map[options]*pa.Props{}
	}
	d.kinds[o] = pp
	return pp
}

// Spawn starts a child of the actor of ctx.
func Spawn(ctx Context, props *Props) *PID {
	c := raw(ctx)
	pid, err := spawn(c.ActorSystem(), props, func(pp *pa.Props) (*PID, error) {
		return c.SpawnNamed(pp, c.ActorSystem().ProcessRegistry.NextId())
	})
	if err != nil {
		panic(err) // protoactor's Spawn does the same
	}
	return pid
}

// SpawnNamed starts a child of the actor of ctx with a fixed name.
func SpawnNamed(ctx Context, props *Props, name string) (*PID, error) {
	c := raw(ctx)
	return spawn(c.ActorSystem(), props, func(pp *pa.Props) (*PID, error) { return c.SpawnNamed(pp, name) })
}
