package conn

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzFrame feeds arbitrary frames through the same steps a connection takes: header,
// API table lookup, body decode, and for what decodes, a re-encode. Nothing may panic.
// The f.Add seeds (real requests of every registered API) run in every `go test`.
func FuzzFrame(f *testing.F) {
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("seed"))
	for _, a := range supported() {
		for _, v := range []int16{a.min, a.max} {
			req := kmsg.RequestForKey(a.key)
			req.SetVersion(v)
			f.Add(fm.AppendRequest(nil, req, 42)[4:])
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0, 18, 0, 99, 0, 0, 0, 1, 0xff, 0xff})
	f.Add([]byte{0, 3, 0, 12, 0, 0, 0, 1, 0, 1, 'x', 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, err := parseHeader(b)
		if err != nil {
			return
		}
		entry, ok := apis[h.key]
		if !ok || h.version < entry.min || h.version > entry.max {
			return
		}
		req := kmsg.RequestForKey(h.key)
		req.SetVersion(h.version)
		if err := req.ReadFrom(body); err != nil {
			return
		}
		_ = req.AppendTo(nil)
	})
}
