package broker

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// Each failed accept is labelled by its errno as the listener returns it (wrapped in
// *net.OpError and *os.SyscallError), and the retry waits 5 ms doubling to 1 s.
func TestAcceptErrorReasonAndBackoff(t *testing.T) {
	wrap := func(err error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", err)}
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{wrap(syscall.EMFILE), "emfile"},
		{wrap(syscall.ENFILE), "enfile"},
		{wrap(syscall.ENOBUFS), "enobufs"},
		{wrap(syscall.ENOMEM), "enomem"},
		{wrap(syscall.ECONNABORTED), "econnaborted"},
		{wrap(syscall.EINVAL), "shutdown"},
		{&net.OpError{Op: "accept", Net: "tcp", Err: os.ErrDeadlineExceeded}, "timeout"},
		{wrap(syscall.EPERM), "other"},
		{errors.New("odd"), "other"},
	} {
		if got := acceptErrorReason(c.err); got != c.want {
			t.Errorf("%v: reason %q, want %q", c.err, got, c.want)
		}
	}
	var d time.Duration
	var got []time.Duration
	for range 10 {
		d = nextAcceptDelay(d)
		got = append(got, d)
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want 5 ms doubling to 1 s", got)
		}
	}
}
