package actor

// Background runs work on a goroutine the actor system owns and sends what it returns to
// the actor itself, so slow I/O (an fsync) never blocks Receive. The result arrives as
// an ordinary message; the actor must accept it in any state, as it may have moved on
// meanwhile. Once the system is shutting down, work runs at once in the caller instead:
// it is never dropped, and no goroutine outlives the system.
func Background(ctx Context, work func() any) {
	sys, self := raw(ctx).ActorSystem(), ctx.Self()
	run := func() { sys.Root.Send(self, work()) }
	if g := goroutinesOf(ctx); g == nil || !g.Go(run) {
		run()
	}
}
