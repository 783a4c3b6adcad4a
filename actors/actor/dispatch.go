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
}

// throughput is how many messages a mailbox turn handles before it yields (protoactor's
// default).
const throughput = 300

func newDispatcher() *dispatcher {
	return &dispatcher{work: make(chan func()), done: make(chan struct{})}
}

func (d *dispatcher) Schedule(fn func()) {
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
		fn()
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

// close lets idle goroutines go at once; turns scheduled later still run.
func (d *dispatcher) close() { d.once.Do(func() { close(d.done) }) }

// dispatcherExtension is where a System's dispatcher is registered among its protoactor
// system's extensions (NewSystem, before anything is spawned).
var dispatcherExtension = extensions.NextExtensionID()

func (d *dispatcher) ExtensionID() extensions.ExtensionID { return dispatcherExtension }

func dispatcherOf(sys *pa.ActorSystem) pa.Dispatcher {
	if d, ok := sys.Extensions.Get(dispatcherExtension).(*dispatcher); ok {
		return d
	}
	return pa.NewDefaultDispatcher(throughput)
}

// withDispatcher is a copy of props whose actor runs on sys's dispatcher (props built by
// PropsOf carry none: they do not know the system they will be spawned in).
func withDispatcher(sys *pa.ActorSystem, props *Props) *Props {
	cp := *props
	return cp.Configure(pa.WithDispatcher(dispatcherOf(sys)))
}

// Spawn starts a child of the actor of ctx.
func Spawn(ctx Context, props *Props) *PID {
	c := raw(ctx)
	return c.Spawn(withDispatcher(c.ActorSystem(), props))
}

// SpawnNamed starts a child of the actor of ctx with a fixed name.
func SpawnNamed(ctx Context, props *Props, name string) (*PID, error) {
	c := raw(ctx)
	return c.SpawnNamed(withDispatcher(c.ActorSystem(), props), name)
}
