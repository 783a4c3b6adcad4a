package brokertest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Raw is a bare Kafka connection for wire tests: it writes requests exactly as given and
// reads responses frame by frame, so tests can pipeline, stall or send garbage.
type Raw struct {
	t   testing.TB
	C   net.Conn
	r   *bufio.Reader
	fmt *kmsg.RequestFormatter
}

// Dial connects to addr.
func Dial(t testing.TB, addr string) *Raw {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &Raw{t: t, C: c, r: bufio.NewReader(c), fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("kaas-test"))}
}

// Encode frames req (size, header, body) with correlation id corr.
func (r *Raw) Encode(req kmsg.Request, corr int32) []byte {
	return r.fmt.AppendRequest(nil, req, corr)
}

// Send writes req at its set version with correlation id corr.
func (r *Raw) Send(req kmsg.Request, corr int32) {
	r.t.Helper()
	r.Write(r.Encode(req, corr))
}

// Write writes raw bytes.
func (r *Raw) Write(b []byte) {
	r.t.Helper()
	_ = r.C.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.C.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// ReadFrame reads one response frame (without its size prefix) within timeout.
func (r *Raw) ReadFrame(timeout time.Duration) ([]byte, error) {
	_ = r.C.SetReadDeadline(time.Now().Add(timeout))
	var size [4]byte
	if _, err := io.ReadFull(r.r, size[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Recv reads one response into resp (whose version must be set) and returns its
// correlation id.
func (r *Raw) Recv(resp kmsg.Response) int32 {
	r.t.Helper()
	b, err := r.ReadFrame(10 * time.Second)
	if err != nil {
		r.t.Fatalf("read response: %v", err)
	}
	corr, err := Decode(b, resp)
	if err != nil {
		r.t.Fatalf("decode %T: %v", resp, err)
	}
	return corr
}

// Decode parses a response frame (no size prefix) into resp.
func Decode(b []byte, resp kmsg.Response) (int32, error) {
	if len(b) < 4 {
		return 0, fmt.Errorf("short response")
	}
	corr := int32(binary.BigEndian.Uint32(b))
	body := b[4:]
	if resp.IsFlexible() && resp.Key() != 18 {
		if len(body) < 1 || body[0] != 0 {
			return corr, fmt.Errorf("unexpected response header tags")
		}
		body = body[1:]
	}
	return corr, resp.ReadFrom(body)
}

// Roundtrip sends req and reads its response.
func (r *Raw) Roundtrip(req kmsg.Request, corr int32) kmsg.Response {
	r.t.Helper()
	r.Send(req, corr)
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if got := r.Recv(resp); got != corr {
		r.t.Fatalf("correlation id %d, want %d", got, corr)
	}
	return resp
}

// Closed reports whether the broker closed the connection (EOF or reset) within timeout.
func (r *Raw) Closed(timeout time.Duration) bool {
	_ = r.C.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1)
	for {
		_, err := r.r.Read(buf)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return false
		}
		return true
	}
}
