package conn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"kaas/internal/bufpool"
)

// The socket: the reader goroutine, which reads size-prefixed frames within their
// bounds and deadlines, and the writer goroutine, which writes the responses the actor
// releases. Both belong to the actor that started them (onStarted): the reader returns
// when the socket fails or the actor stops, the writer when the actor closes its queue.

// errFrameTooLarge and friends are the typed reasons a connection closes.
var (
	errFrameTooLarge = errors.New("frame larger than socket.request.max.bytes")
	errNegativeFrame = errors.New("negative frame size")
	errIdle          = errors.New("idle timeout")
	errDraining      = errors.New("broker stopping")
	errFrameTimeout  = errors.New("request frame not read whole within socket.request.read.timeout.ms")
)

// readLoop reads frames until the socket fails. It takes an in-flight token before each
// frame, so a client with MaxInflight unanswered requests is simply not read from.
//
// A frame's buffer starts at firstChunk and doubles as its bytes arrive. A frame larger
// than firstChunk reserves the rest of its size from the broker's request budget
// (queued.max.request.bytes) and gives it back when the frame is whole: a reader that
// cannot get budget stops reading until it can, and a client that announces 100 MB and
// sends a byte a second holds a buffer the size of what it sent, until
// socket.request.read.timeout.ms closes it.
func (a *connActor) readLoop(send func(any)) {
	nc := a.cfg.Conn
	if !a.handshakeTLS(send) {
		return
	}
	a.rbuf = make([]byte, readBuffer)
	var size [4]byte
	for {
		select {
		case a.tokens <- struct{}{}:
		case <-a.done:
			// Stopped with the bound reached: the unanswered requests never give their
			// tokens back, so do not wait for one.
			return
		}
		if a.stopped.Load() {
			send(&readerDone{err: errDraining})
			return
		}
		a.frameStart = time.Time{}
		if err := a.readFull(nc, size[:]); err != nil {
			send(&readerDone{err: err})
			return
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		switch {
		case n < 0:
			send(&readerDone{err: errNegativeFrame})
			return
		case n > a.cfg.MaxFrame:
			send(&readerDone{err: fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)})
			return
		case a.cfg.SASL && !a.saslDone.Load() && a.cfg.MaxUnauthenticatedFrame > 0 && n > a.cfg.MaxUnauthenticatedFrame:
			// A client that has not authenticated does not get to make the broker hold
			// 100 MiB (Apache's sasl.server.max.receive.size).
			send(&readerDone{err: fmt.Errorf("%w: %d bytes before SASL authentication", errFrameTooLarge, n)})
			return
		}
		b, err := a.readBody(nc, int(n))
		if err != nil {
			send(&readerDone{err: err})
			return
		}
		send(&frame{b: b, read: time.Now()})
	}
}

// firstChunk is what a frame's buffer starts at, outside the request budget (a
// connection holds at most one frame being read): most requests fit.
const firstChunk = 32 << 10

// readBody reads a frame body of n bytes into a buffer that grows as its bytes arrive.
func (a *connActor) readBody(nc net.Conn, n int) ([]byte, error) {
	budget := a.env.RequestBytes
	b := make([]byte, min(n, firstChunk))
	var reserved int64
	defer func() { budget.Release(reserved) }()
	got := 0
	for {
		if err := a.readFull(nc, b[got:]); err != nil {
			if errors.Is(err, errFrameTimeout) {
				err = fmt.Errorf("%w: %d of %d bytes after %d ms", err, len(b)-a.lastShort, n, a.cfg.FrameTimeout.Milliseconds())
			}
			return nil, err
		}
		got = len(b)
		if got == n {
			return b, nil
		}
		if reserved == 0 {
			// The rest of the frame is reserved at once, as Apache's memory pool does: a
			// reader never waits while holding part of the budget, so readers cannot
			// deadlock one another. The buffer itself still grows only as bytes arrive.
			waited := time.Now()
			if !budget.Acquire(int64(n-len(b)), a.quit) {
				return nil, errDraining
			}
			// Time spent waiting for the budget is the broker's, not the client's.
			a.frameEnd = a.frameEnd.Add(time.Since(waited))
			reserved = int64(n - len(b))
		}
		next := min(n, 2*len(b))
		nb := make([]byte, next)
		copy(nb, b)
		b = nb
	}
}

// readFull reads len(b) bytes. Between frames the idle deadline applies, and closes only
// when no request is in flight (a JoinGroup may legitimately wait minutes for its round).
// From a frame's first byte the frame has FrameTimeout to arrive whole, and the idle
// deadline is not re-armed by its bytes: a client sending a byte a second is closed.
//
// Small reads go through rbuf: one system call usually brings a frame's size and body,
// or several pipelined frames. A read at least as large as rbuf goes straight into b.
func (a *connActor) readFull(nc net.Conn, b []byte) error {
	got := copy(b, a.rbuf[a.rpos:a.rend])
	a.rpos += got
	if got > 0 {
		a.startFrame()
	}
	for got < len(b) {
		_ = nc.SetReadDeadline(a.readDeadline())
		var n int
		var err error
		if len(b)-got >= len(a.rbuf) {
			n, err = nc.Read(b[got:])
			got += n
		} else {
			n, err = nc.Read(a.rbuf)
			a.rend = n
			a.rpos = copy(b[got:], a.rbuf[:n])
			got += a.rpos
		}
		if n > 0 {
			a.startFrame()
		}
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if a.stopped.Load() {
				return errDraining
			}
			if !a.frameStart.IsZero() && a.cfg.FrameTimeout > 0 && !time.Now().Before(a.frameEnd) {
				a.lastShort = len(b) - got
				return errFrameTimeout
			}
			if len(a.tokens) > 1 {
				continue
			}
			return errIdle
		}
		if got > 0 && errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// startFrame notes the first byte of a frame.
func (a *connActor) startFrame() {
	if a.frameStart.IsZero() {
		a.frameStart = time.Now()
		a.frameEnd = a.frameStart.Add(a.cfg.FrameTimeout)
	}
}

// readDeadline is the deadline of the next read: the frame's when one is being read, the
// idle one counted from the frame's first byte (or from now between frames) when no
// request is in flight; none when neither applies.
func (a *connActor) readDeadline() time.Time {
	var d time.Time
	if !a.frameStart.IsZero() && a.cfg.FrameTimeout > 0 {
		d = a.frameEnd
	}
	if a.cfg.Idle > 0 {
		from := a.frameStart
		if from.IsZero() || len(a.tokens) > 1 {
			from = time.Now()
		}
		if idle := from.Add(a.cfg.Idle); d.IsZero() || idle.Before(d) {
			d = idle
		}
	}
	return d
}

// readBuffer is the read-ahead of a connection: a few typical requests (a heartbeat is
// about 100 bytes), small enough that idle connections stay cheap.
const readBuffer = 1024

func (a *connActor) writeLoop(send func(any)) {
	nc := a.cfg.Conn
	failed := false
	var pooled []*bufpool.Buffer // the writer's own, emptied after every write
	for b := range a.out {
		// Responses already queued behind this one leave with it in one writev: a
		// pipelining client gets a burst of answers for one system call.
		bufs := net.Buffers{b.b}
		pooled = append(pooled, b.pool)
	more:
		for len(bufs) < cap(a.out) {
			select {
			case nb, ok := <-a.out:
				if !ok {
					break more
				}
				bufs = append(bufs, nb.b)
				pooled = append(pooled, nb.pool)
			default:
				break more
			}
		}
		n := len(bufs)
		var written int64
		for _, b := range bufs {
			written += int64(len(b))
		}
		if !failed {
			if _, err := bufs.WriteTo(nc); err != nil {
				failed = true
				send(&writerDone{err: err})
			}
		}
		// Written (or never to be): nothing reads the frames any more.
		for i, p := range pooled {
			p.Release()
			pooled[i] = nil
		}
		pooled = pooled[:0]
		a.unwritten.Add(-written)
		a.env.ResponseBytes.Release(written)
		if a.wantWake.Swap(false) {
			send(&resume{})
		}
		for range n {
			<-a.tokens
		}
	}
	_ = nc.Close()
	if a.cfg.OnStop != nil {
		a.cfg.OnStop()
	}
}
