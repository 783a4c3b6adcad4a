package conn

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const apiVersionsKey = 18

// header is a parsed request header (v1, or v2 with tagged fields for flexible versions).
type header struct {
	key           int16
	version       int16
	correlationID int32
	clientID      string
}

var errShortHeader = errors.New("request header truncated")

// parseHeader splits a request frame into its header and body. Header v2 (tagged fields)
// is used when the request version is flexible; the client id is never compact. kmsg has
// no request-header codec (it encodes headers inside its client), so this is the one
// place that reads one.
func parseHeader(b []byte) (header, []byte, error) {
	var h header
	if len(b) < 8 {
		return h, nil, errShortHeader
	}
	r := kbin.Reader{Src: b}
	h.key = r.Int16()
	h.version = r.Int16()
	h.correlationID = r.Int32()
	// The client id is a nullable non-compact string; null reads as "".
	if n := r.Int16(); n > 0 {
		h.clientID = string(r.Span(int(n)))
	}
	if !r.Ok() {
		return h, nil, errShortHeader
	}
	rest := r.Src
	if requestFlexible(h.key, h.version) {
		if len(rest) > 0 && rest[0] == 0 {
			// No tagged fields, the usual case.
			return h, rest[1:], nil
		}
		return skipHeaderTags(h, rest)
	}
	return h, rest, nil
}

func skipHeaderTags(h header, b []byte) (header, []byte, error) {
	r := kbin.Reader{Src: b}
	kmsg.SkipTags(&r)
	if !r.Ok() {
		return h, nil, errShortHeader
	}
	return h, r.Src, nil
}

// requestFlexible says whether key at version uses header v2. Unknown keys and versions
// beyond kmsg's are treated as flexible: such requests are refused anyway, except
// ApiVersions, whose newer versions are flexible.
func requestFlexible(key, version int16) bool {
	if a, ok := apis[key]; ok {
		if version > a.max {
			// Beyond what this broker speaks: decided by kmsg, as for unknown keys.
			return requestFlexibleKmsg(key, version)
		}
		return a.flexibleFrom >= 0 && version >= a.flexibleFrom
	}
	return requestFlexibleKmsg(key, version)
}

func requestFlexibleKmsg(key, version int16) bool {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return false
	}
	if version > req.MaxVersion() {
		return true
	}
	req.SetVersion(version)
	return req.IsFlexible()
}

// encodeResponse frames resp: size, correlation id, header tags (flexible responses
// except ApiVersions, whose response header is always v0), body.
// sizeHint is the buffer's starting capacity.
func encodeResponse(c *Call, resp kmsg.Response, sizeHint int) []byte {
	buf := make([]byte, 4, max(sizeHint, 16))
	buf = kbin.AppendInt32(buf, c.CorrelationID)
	if resp.IsFlexible() && c.Key != apiVersionsKey {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	n := uint32(len(buf) - 4)
	buf[0], buf[1], buf[2], buf[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return buf
}
