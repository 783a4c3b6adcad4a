package conn

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/internal/bufpool"
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
	return appendResponse(make([]byte, 0, max(sizeHint, 16)), c, resp)
}

// appendResponse is encodeResponse into buf's room.
func appendResponse(buf []byte, c *Call, resp kmsg.Response) []byte {
	buf = append(buf, 0, 0, 0, 0)
	buf = kbin.AppendInt32(buf, c.CorrelationID)
	if resp.IsFlexible() && c.Key != apiVersionsKey {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	n := uint32(len(buf) - 4)
	buf[0], buf[1], buf[2], buf[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return buf
}

// encodeFetchResponse is encodeResponse for a Fetch response, into one buffer from
// internal/bufpool sized up front (fetchFrameBound), so kmsg copies each partition's
// record batches once and never grows the frame (a frame grown from a guess copied a
// fetch of megabytes several times over, and a new buffer per response cost the
// allocator and the collector as much again). pool is the buffer to give back once the
// frame is written; nil when the frame is not pooled (small, or it outgrew the bound).
func encodeFetchResponse(c *Call, r *kmsg.FetchResponse) (frame []byte, pool *bufpool.Buffer) {
	b, pool := bufpool.Get(fetchFrameBound(r))
	frame = appendResponse(b[:0], c, r)
	if pool != nil && &frame[0] != &b[:1][0] {
		pool.Release() // outgrown: append moved the frame to a buffer of its own
		pool = nil
	}
	return frame, pool
}

// fetchFrameBound is at least the size of r's frame at any version: its record
// batches' and strings' lengths and the unknown tags' bytes, and a generous bound for
// every fixed-size field, length prefix and tagged field.
func fetchFrameBound(r *kmsg.FetchResponse) int64 {
	n := int64(64) + tagsBound(&r.UnknownTags)
	for i := range r.Brokers {
		b := &r.Brokers[i]
		n += 32 + int64(len(b.Host)) + tagsBound(&b.UnknownTags)
		if b.Rack != nil {
			n += int64(len(*b.Rack))
		}
	}
	for i := range r.Topics {
		t := &r.Topics[i]
		n += 32 + int64(len(t.Topic)) + tagsBound(&t.UnknownTags)
		for j := range t.Partitions {
			p := &t.Partitions[j]
			n += 128 + int64(len(p.RecordBatches)) + tagsBound(&p.UnknownTags) +
				tagsBound(&p.DivergingEpoch.UnknownTags) + tagsBound(&p.CurrentLeader.UnknownTags) +
				tagsBound(&p.SnapshotID.UnknownTags)
			for k := range p.AbortedTransactions {
				n += 24 + tagsBound(&p.AbortedTransactions[k].UnknownTags)
			}
		}
	}
	return n
}

// tagsBound is at least the bytes unknown tags take: key, length and value each.
func tagsBound(t *kmsg.Tags) int64 {
	if t.Len() == 0 {
		return 0
	}
	var n int64
	t.Each(func(_ uint32, v []byte) { n += 10 + int64(len(v)) })
	return n
}
