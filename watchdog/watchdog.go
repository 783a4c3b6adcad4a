// Package watchdog ends the client connections of a broker that has stopped running.
//
// A broker paused past its lease (SIGSTOP, a stalled process) keeps its sockets: its
// kernel still completes TCP handshakes and acknowledges requests that no process will
// answer. Its peers adopt its groups and partitions once its lease lapses, but a client
// waits on a request already sent to it, or dials it again, until the client's own
// timeouts end (tens of seconds, and a rebalance). A killed broker's sockets end at once,
// and clients then find the new owners within a metadata refresh.
//
// The watchdog gives a paused broker a killed broker's sockets. It is a second process
// (this binary again, started by Start) that holds a duplicate of each socket the broker
// tracks: its listeners and the connections they accept, passed over a Unix socket pair
// (SCM_RIGHTS). The broker sends it a heartbeat with the end of its lease every interval.
// Once the lease has ended and no heartbeat has come for Stale, the watchdog shuts every
// tracked socket down (shutdown(2) acts on the socket, whichever process calls it): clients
// see their connections end and new dials refused. A broker that runs again finds its
// listener shut and listens again (Relisten), and its lease lapsed, as after any pause.
//
// Nothing here can end a connection early: the watchdog acts only after the lease the
// broker itself last renewed has ended, when its peers may already have adopted what it
// owned. A frozen cgroup or VM freezes the watchdog too; then clients wait as before.
package watchdog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// envFD names the descriptor of the watchdog's end of the socket pair in its
// environment; its presence makes this binary the watchdog (see init).
const envFD = "KAAS_PAUSE_WATCHDOG_FD"

// envStale is the heartbeat silence, in milliseconds, after which a lapsed lease means
// the broker is not running.
const envStale = "KAAS_PAUSE_WATCHDOG_STALE_MS"

// Message kinds, parent to watchdog. Each message is msgLen bytes: the kind, then two
// little-endian int64s.
const (
	msgBeat  = 'H' // a heartbeat: the lease's end on CLOCK_MONOTONIC (ns), 0 when none is held
	msgTrack = 'A' // a socket to hold: its id; the descriptor travels as SCM_RIGHTS
	msgDrop  = 'D' // the socket with this id was closed: drop the duplicate
	msgLen   = 17
)

// queueLen bounds the messages waiting for the sender goroutine. A watchdog that falls
// this far behind is not reading: the broker stops it (see fail).
const queueLen = 4096

// Config is how Start runs a watchdog.
type Config struct {
	// Interval between heartbeats.
	Interval time.Duration
	// Stale is the heartbeat silence that, with the lease ended, means the broker is
	// not running. A few intervals: a broker that is running but late renews its lease.
	Stale time.Duration
	// LeaseEnd is the end of this broker's lease on its own clock (fence.ValidUntil);
	// the zero time while none is held.
	LeaseEnd func() time.Time
	Log      zerolog.Logger
}

// Watchdog is the broker's side of its watchdog process.
type Watchdog struct {
	cfg  Config
	cmd  *exec.Cmd
	sock *os.File // this process's end of the socket pair
	fd   int      // sock's descriptor (blocking)
	q    chan msg
	quit chan struct{}
	done chan struct{} // closed when the sender goroutine has ended
	ids  atomic.Uint64
	// failed is set once the watchdog is gone or stopped: tracking is then a no-op.
	failed   atomic.Bool
	stopOnce sync.Once
	// beats is cleared by tests to stand for a paused broker (stopBeats); beatMu orders
	// a beat's check of it with its send.
	beats  atomic.Bool
	beatMu sync.Mutex
	exited chan struct{} // closed when the child has been reaped
}

type msg struct {
	kind byte
	a    int64
	fd   int // a duplicate to send and close (msgTrack), else -1
}

// Start starts the watchdog process: this executable again, which init turns into the
// watchdog. It fails when the process cannot be started; the broker runs without one.
func Start(cfg Config) (*Watchdog, error) {
	if cfg.Interval <= 0 || cfg.Stale <= 0 || cfg.LeaseEnd == nil {
		return nil, errors.New("watchdog: interval, stale and lease end are required")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("watchdog: socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "watchdog"), os.NewFile(uintptr(fds[1]), "watchdog-child")
	exe, err := os.Executable()
	if err != nil {
		mine.Close()
		theirs.Close()
		return nil, fmt.Errorf("watchdog: executable: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{"kaas-pause-watchdog"}
	cmd.Env = append(os.Environ(), envFD+"=3", envStale+"="+strconv.FormatInt(cfg.Stale.Milliseconds(), 10))
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	// Its own process group, so a terminal's signals reach the broker alone; it ends
	// with the broker (the socket pair's end, and the death signal as a second guard).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		mine.Close()
		theirs.Close()
		return nil, fmt.Errorf("watchdog: start: %w", err)
	}
	theirs.Close()
	w := &Watchdog{cfg: cfg, cmd: cmd, sock: mine, fd: int(mine.Fd()), q: make(chan msg, queueLen), quit: make(chan struct{}),
		done: make(chan struct{}), exited: make(chan struct{})}
	w.beats.Store(true)
	go func() {
		_ = cmd.Wait()
		close(w.exited)
	}()
	go w.run()
	cfg.Log.Info().Int("pid", cmd.Process.Pid).Dur("stale_ms", cfg.Stale).Msg("pause_watchdog_started")
	return w, nil
}

// Pid is the watchdog process's id.
func (w *Watchdog) Pid() int { return w.cmd.Process.Pid }

// run sends the heartbeats and the queued messages until Stop.
func (w *Watchdog) run() {
	defer close(w.done)
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	w.beat()
	for {
		select {
		case <-w.quit:
			w.drainQueue()
			return
		case <-w.exited:
			w.fail("exited")
			w.drainQueue()
			return
		case <-t.C:
			w.beat()
		case m := <-w.q:
			w.send(m)
		}
	}
}

// beat sends the end of the lease, on the clock both processes share.
func (w *Watchdog) beat() {
	w.beatMu.Lock()
	defer w.beatMu.Unlock()
	if !w.beats.Load() {
		return
	}
	var end int64
	if until := w.cfg.LeaseEnd(); !until.IsZero() {
		end = monoNow() + int64(time.Until(until))
	}
	w.send(msg{kind: msgBeat, a: end, fd: -1})
}

// send writes m; a failed write ends the watchdog (it then drops what it holds).
func (w *Watchdog) send(m msg) {
	if m.fd >= 0 {
		defer unix.Close(m.fd)
	}
	if w.failed.Load() {
		return
	}
	var b [msgLen]byte
	b[0] = m.kind
	binary.LittleEndian.PutUint64(b[1:], uint64(m.a))
	var oob []byte
	if m.fd >= 0 {
		oob = unix.UnixRights(m.fd)
	}
	if err := unix.Sendmsg(w.fd, b[:], oob, nil, 0); err != nil {
		w.fail(err.Error())
	}
}

// drainQueue closes the duplicates of messages that will not be sent.
func (w *Watchdog) drainQueue() {
	for {
		select {
		case m := <-w.q:
			if m.fd >= 0 {
				unix.Close(m.fd)
			}
		default:
			return
		}
	}
}

// fail turns tracking off for good and ends the watchdog's side of the pair, so the
// watchdog drops every duplicate it holds and exits.
func (w *Watchdog) fail(reason string) {
	if w.failed.Swap(true) {
		return
	}
	_ = unix.Shutdown(w.fd, unix.SHUT_RDWR)
	w.cfg.Log.Error().Str("reason", reason).Msg("pause_watchdog_lost")
}

// enqueue hands m to the sender; a full queue means the watchdog is not reading.
func (w *Watchdog) enqueue(m msg) {
	if w.failed.Load() {
		if m.fd >= 0 {
			unix.Close(m.fd)
		}
		return
	}
	select {
	case w.q <- m:
	default:
		if m.fd >= 0 {
			unix.Close(m.fd)
		}
		w.fail("queue full")
	}
}

// track gives the watchdog a duplicate of c's socket and returns the release to call
// before c is closed (nil when c is not tracked).
func (w *Watchdog) track(c syscall.Conn) func() {
	if w == nil || w.failed.Load() {
		return nil
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	dup := -1
	_ = rc.Control(func(fd uintptr) {
		dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if err != nil || dup < 0 {
		return nil
	}
	id := int64(w.ids.Add(1))
	w.enqueue(msg{kind: msgTrack, a: id, fd: dup})
	var once sync.Once
	return func() {
		once.Do(func() {
			// Shut the socket down first: the watchdog's duplicate must not keep a
			// connection this process closes open until the watchdog drops it.
			_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
			w.enqueue(msg{kind: msgDrop, a: id, fd: -1})
		})
	}
}

// Listener returns ln with its socket and every connection it accepts tracked. With a
// nil Watchdog it still listens again after a shutdown (Relisten).
func (w *Watchdog) Listener(ln *net.TCPListener) net.Listener {
	addr, _ := ln.Addr().(*net.TCPAddr)
	return &listener{TCPListener: ln, w: w, addr: addr, release: w.track(ln)}
}

// Stop ends the watchdog: it drops every duplicate and exits, and is reaped.
func (w *Watchdog) Stop() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() {
		// Shutting the pair down unblocks a send the watchdog is not reading, and
		// tells it to drop what it holds and exit.
		w.failed.Store(true)
		_ = unix.Shutdown(w.fd, unix.SHUT_RDWR)
		close(w.quit)
		<-w.done
		_ = w.sock.Close()
		select {
		case <-w.exited:
		case <-time.After(2 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
	})
}

// listener tracks its socket and the connections it accepts.
type listener struct {
	*net.TCPListener
	w       *Watchdog
	addr    *net.TCPAddr
	release func()
	once    sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.TCPListener.AcceptTCP()
	if err != nil {
		return nil, err
	}
	release := l.w.track(c)
	if release == nil {
		return c, nil
	}
	return &conn{TCPConn: c, release: release}, nil
}

func (l *listener) Close() error {
	l.once.Do(func() {
		if l.release != nil {
			l.release()
		}
	})
	return l.TCPListener.Close()
}

// Relisten puts a listener shut down by the watchdog back into the listening state, in
// place: the same socket, address and accept loop. A listener that was closed stays closed.
func (l *listener) Relisten() error { return Relisten(l.TCPListener, l.addr) }

// Relisten puts ln, shut down by another process's shutdown(2), back to listening on
// addr (its address when it was made: a port the kernel chose is given back on shutdown).
func Relisten(ln *net.TCPListener, addr *net.TCPAddr) error {
	if addr == nil {
		return errors.New("relisten: no address")
	}
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = relisten(int(fd), addr) }); err != nil {
		return err
	}
	return lerr
}

func relisten(fd int, addr *net.TCPAddr) error {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("relisten: getsockname: %w", err)
	}
	// A port the kernel chose was given back by the shutdown (getsockname still shows
	// it): bind it again. A port bound by name is kept, and binding fails with EINVAL.
	// The socket keeps its family: Go listens on "0.0.0.0" with an IPv6 socket.
	var to unix.Sockaddr
	switch sa.(type) {
	case *unix.SockaddrInet4:
		b := &unix.SockaddrInet4{Port: addr.Port}
		copy(b.Addr[:], addr.IP.To4())
		to = b
	case *unix.SockaddrInet6:
		b := &unix.SockaddrInet6{Port: addr.Port}
		copy(b.Addr[:], addr.IP.To16())
		to = b
	default:
		return fmt.Errorf("relisten: not a TCP socket")
	}
	if err := unix.Bind(fd, to); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("relisten: bind %s: %w", addr, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		return fmt.Errorf("relisten: %w", err)
	}
	return nil
}

// conn is an accepted connection whose duplicate the watchdog holds.
type conn struct {
	*net.TCPConn
	release func()
}

func (c *conn) Close() error {
	c.release()
	return c.TCPConn.Close()
}

// monoNow is CLOCK_MONOTONIC in nanoseconds: one clock for every process on the host.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
