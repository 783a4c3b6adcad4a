package actor

// Background runs work on its own goroutine and sends what it returns to the actor
// itself, so slow I/O (an fsync) never blocks Receive. The result arrives as an ordinary
// message; the actor must accept it in any state, as it may have moved on meanwhile.
func Background(ctx Context, work func() any) {
	sys, self := raw(ctx).ActorSystem(), ctx.Self()
	go func() { sys.Root.Send(self, work()) }()
}
