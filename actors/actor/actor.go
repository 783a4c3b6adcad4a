// Package actor is the thin layer kaas keeps between its actors and protoactor-go: the
// actor system with zerolog logging, spawning and graceful stopping, timers that post a
// message back to the actor, the Promise a parked request is answered through, and the
// answer a panic gives the request it interrupted.
// Everything else in kaas imports this package, never protoactor-go itself, so the actor
// code reads as plain Go and the library can be swapped in one place.
package actor

import (
	"log/slog"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// Context is what an actor's Receive is handed: the message and the few things an actor
// does in reply. It is deliberately smaller than protoactor's context: no RequestFuture,
// ReenterAfter, Stash or Respond (an actor answers through a Promise), and no Spawn past
// the dispatcher (children start with Spawn/SpawnNamed of this package).
type Context interface {
	// Message is the message being handled.
	Message() any
	// Self is this actor; Parent the actor that spawned it.
	Self() *PID
	Parent() *PID
	// Send delivers msg to pid with no reply expected.
	Send(pid *PID, msg any)
	// Stop stops pid after the message it is handling; Poison after its mailbox.
	Stop(pid *PID)
	Poison(pid *PID)
	// SetReceiveTimeout arms (d >= 1 ms) or clears the idle timeout: one
	// *ReceiveTimeout arrives after d with no message but Tick-marked ones; set it
	// again to be told again.
	SetReceiveTimeout(d time.Duration)
	// Watch asks for a *Terminated when pid stops; Unwatch takes that back.
	Watch(pid *PID)
	Unwatch(pid *PID)
}

// Actor is anything with Receive(Context).
type Actor interface {
	Receive(ctx Context)
}

// Tick marks a periodic message (embed it) that must not count as activity for
// SetReceiveTimeout, so an idle actor is still stopped while its timers tick.
type Tick struct{}

func (Tick) keepsIdle() {}

type idleNeutral interface{ keepsIdle() }

// raw is the protoactor context behind ctx: every Context a Receive is handed is one.
func raw(ctx Context) pa.Context { return ctx.(pa.Context) }

// The protoactor types kaas actors use, under their own names.
type (
	// PID addresses an actor.
	PID = pa.PID
	// Started is the first message of every incarnation.
	Started = pa.Started
	// Stopping is sent before an actor stops: answer every parked waiter.
	Stopping = pa.Stopping
	// Stopped is the last message an actor gets.
	Stopped = pa.Stopped
	// Restarting is sent to the failed incarnation before a restart: answer every parked waiter.
	Restarting = pa.Restarting
	// ReceiveTimeout fires once after SetReceiveTimeout's idle period.
	ReceiveTimeout = pa.ReceiveTimeout
	// Terminated tells a watcher that a watched actor stopped.
	Terminated = pa.Terminated
	// SupervisorStrategy decides what happens to a failed child.
	SupervisorStrategy = pa.SupervisorStrategy
)

// System is one actor system with its root context.
type System struct {
	sys  *pa.ActorSystem
	root *pa.RootContext
	disp *dispatcher
	gor  *Goroutines
}

// NewSystem starts an actor system whose own logs (slog) go to log at Warn and above.
// Dead letters of late replies are not logged: a reply to a connection that has closed is
// expected, not an event.
func NewSystem(log zerolog.Logger) *System {
	handler := zerolog.NewSlogHandler(log.Level(maxLevel(log.GetLevel(), zerolog.WarnLevel)))
	sys := pa.NewActorSystem(
		pa.WithLoggerFactory(func(*pa.ActorSystem) *slog.Logger {
			return slog.New(handler).WithGroup("actor")
		}),
		pa.WithDeadLetterRequestLogging(false),
		pa.WithDeadLetterThrottleCount(0),
	)
	d := newDispatcher()
	sys.Extensions.Register(d)
	g := &Goroutines{}
	sys.Extensions.Register(g)
	return &System{sys: sys, root: sys.Root, disp: d, gor: g}
}

func maxLevel(a, b zerolog.Level) zerolog.Level {
	if a > b {
		return a
	}
	return b
}

// Props describes how to make an actor: the function that builds a fresh one on every
// (re)start and how it is supervised. Spawning it does not copy it into protoactor's
// props: the actors of one kind share one protoactor Props per system (dispatch.go), so
// a live actor costs what protoactor keeps for any actor and no Props of its own.
type Props struct {
	produce func() Actor
	o       options
}

// PropsOf returns props that build a fresh actor with produce on every (re)start.
func PropsOf(produce func() Actor, opts ...Option) *Props {
	p := &Props{produce: produce}
	for _, opt := range opts {
		opt(&p.o)
	}
	return p
}

// Option tunes PropsOf.
type Option func(*options)

type options struct {
	supervisor pa.SupervisorStrategy
	guardian   pa.SupervisorStrategy // NoRestart, Resume
}

// WithSupervisor sets how the actor supervises its children.
func WithSupervisor(s SupervisorStrategy) Option { return func(o *options) { o.supervisor = s } }

// NoRestart makes an actor spawned under the root stop when it panics instead of being
// restarted (protoactor's root default): for an actor whose state cannot be rebuilt in
// a fresh incarnation, such as a connection, whose socket and goroutines belong to the
// incarnation that started them. It gets *Stopping as on any stop.
func NoRestart() Option { return func(o *options) { o.guardian = stopGuardian } }

// Resume makes an actor spawned under the root go on after a panic with its state as the
// panic left it, instead of being restarted with a fresh one: for an actor whose state a
// new incarnation could not rebuild (the offsets journal: its sequence numbers, which
// keys pin which segment). The message the panic came from is dropped, its request
// answered (crash.go); the actor mends what the turn left half done in Panicked
// (PanicHandler). It gets no Restarting.
func Resume() Option { return func(o *options) { o.guardian = resumeGuardian } }

// stopGuardian and resumeGuardian are the supervisors of the root's NoRestart and Resume
// actors (protoactor keeps a guardian per strategy value, so there is one of each for
// the whole process).
var (
	stopGuardian   = pa.NewOneForOneStrategy(0, 0, func(any) pa.Directive { return pa.StopDirective })
	resumeGuardian = pa.NewOneForOneStrategy(0, 0, func(any) pa.Directive { return pa.ResumeDirective })
)

// RestartChildren restarts a failed child up to max times within window, then stops it.
// onFailure, if set, sees each panic value first (the child logs its own stack).
func RestartChildren(max int, window time.Duration, onFailure func(reason any)) SupervisorStrategy {
	return pa.NewOneForOneStrategy(max, window, func(reason any) pa.Directive {
		if onFailure != nil {
			onFailure(reason)
		}
		return pa.RestartDirective
	})
}

// RestartChildrenOf is RestartChildren with onFailure told which child failed, so one
// strategy can serve every actor of a kind (see Props): a strategy made per actor would
// make each its own kind.
func RestartChildrenOf(max int, window time.Duration, onFailure func(child *PID, reason any)) SupervisorStrategy {
	return &toldStrategy{
		SupervisorStrategy: pa.NewOneForOneStrategy(max, window, func(any) pa.Directive { return pa.RestartDirective }),
		told:               onFailure,
	}
}

// toldStrategy tells told of each failure, then lets its strategy handle it.
type toldStrategy struct {
	pa.SupervisorStrategy
	told func(child *PID, reason any)
}

func (s *toldStrategy) HandleFailure(sys *pa.ActorSystem, sup pa.Supervisor, child *PID, rs *pa.RestartStatistics, reason, message any) {
	s.told(child, reason)
	s.SupervisorStrategy.HandleFailure(sys, sup, child, rs, reason, message)
}

// ResumeChildren makes a failed child go on with its state as the panic left it, instead
// of being restarted with a fresh one: for children whose state a new incarnation could
// not rebuild from its props (a transactional id's actor, whose state moved on since it
// was spawned). The message the panic came from is dropped and its request answered
// (crash.go). onFailure, if set, sees each panic value first.
func ResumeChildren(onFailure func(reason any)) SupervisorStrategy {
	return pa.NewOneForOneStrategy(0, 0, func(reason any) pa.Directive {
		if onFailure != nil {
			onFailure(reason)
		}
		return pa.ResumeDirective
	})
}

// Spawn starts an actor under the root.
func (s *System) Spawn(props *Props) *PID {
	pid, err := spawn(s.sys, props, func(pp *pa.Props) (*PID, error) {
		return s.root.SpawnNamed(pp, s.sys.ProcessRegistry.NextId())
	})
	if err != nil {
		panic(err) // protoactor's root Spawn does the same
	}
	return pid
}

// SpawnNamed starts an actor under the root with a fixed name.
func (s *System) SpawnNamed(props *Props, name string) (*PID, error) {
	return spawn(s.sys, props, func(pp *pa.Props) (*PID, error) { return s.root.SpawnNamed(pp, name) })
}

// Send delivers msg to pid with no sender.
func (s *System) Send(pid *PID, msg any) { s.root.Send(pid, msg) }

// Request delivers msg to pid and blocks until it Responds or timeout passes. For tests
// and for callers outside any actor; actors never call it.
func (s *System) Request(pid *PID, msg any, timeout time.Duration) (any, error) {
	return s.root.RequestFuture(pid, msg, timeout).Result()
}

// Stop stops pid after the message it is handling (its mailbox is dropped) and waits up
// to timeout for it to be gone.
func (s *System) Stop(pid *PID, timeout time.Duration) error {
	return waitFor(s.root.StopFuture(pid), timeout)
}

// StopNow asks pid to stop after the message it is handling and does not wait.
func (s *System) StopNow(pid *PID) { s.root.Stop(pid) }

// Poison stops pid after everything already in its mailbox, then waits up to timeout.
// Stopping an actor stops its children first. ActorSystem.Shutdown alone stops nothing,
// so a graceful stop poisons the top actors and waits for them.
func (s *System) Poison(pid *PID, timeout time.Duration) error {
	return waitFor(s.root.PoisonFuture(pid), timeout)
}

// waitFor waits for a stop future up to timeout. The future's own wait has no bound
// (its timeout is the future's, which stop futures do not set), so a stop that never
// completes leaves one goroutine parked on it, not the caller.
func waitFor(f *pa.Future, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- f.Wait() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errTimeout
	}
}

// Go runs f on a goroutine the system owns (see Goroutines); false once Shutdown began.
func (s *System) Go(f func()) bool { return s.gor.Go(f) }

// shutdownWait bounds how long Shutdown waits for the system's goroutines.
const shutdownWait = 10 * time.Second

// Shutdown releases the system's own resources after the actors were stopped: it
// refuses new goroutines and waits (up to shutdownWait) for those started through Go and
// Background. It reports whether they all ended.
func (s *System) Shutdown() bool {
	joined := s.gor.Stop(shutdownWait)
	s.sys.Shutdown()
	s.disp.close()
	return joined
}

// Halt ends every actor of the system where it stands, without stopping it: no turn
// starts after it (what is sent to an actor stays unhandled in its mailbox, and neither
// its Stopping nor its timers' messages are handled), and it waits up to wait for the
// turns already running to end. It reports whether they all did. A stop that has
// stopped every actor that must be stopped (answered its requests, made its writes
// durable) halts what is left instead of stopping it one by one: a broker alone leaves
// its groups' actors so (their state is in the offsets journal). Shutdown follows.
func (s *System) Halt(wait time.Duration) bool { return s.disp.halt(wait) }

// Raw is the underlying protoactor system, for this package's siblings' tests only.
func (s *System) Raw() *pa.ActorSystem { return s.sys }

type timeoutError struct{}

func (timeoutError) Error() string { return "actor: stop timed out" }

var errTimeout error = timeoutError{}
