package conn

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
	"kaas/internal/bufpool"
	"kaas/metrics"
)

// Responses in request order: each request read has a slot in a queue, a handler (or
// the answer it awaited) completes the slot, and every done slot at the head of the queue
// goes to the writer.

// outFrame is one response as the writer gets it.
type outFrame struct {
	b    []byte
	pool *bufpool.Buffer // b's pooled buffer, released once b is written; nil when not pooled
}

type slot struct {
	call  *Call
	done  bool
	bytes []byte // the encoded response, size prefix included; nil for no response
	// frame is the pooled buffer bytes lie in (a Fetch response's, encodeFetchResponse),
	// given back by the writer once it has written them; nil when not pooled.
	frame *bufpool.Buffer
	// bufs are the pooled buffers of a Fetch's records, given back as soon as the
	// response is encoded (its frame holds a copy).
	bufs  []*partition.ReadBuffer
	built int64 // the bytes' length while counted as unwritten and not yet handed to the writer
	grant int64 // response bytes promised to this call's handler (part of granted)
}

// pending is a reply the connection waits for: a call's (convert makes its response), or
// answer i of a gather's.
type pending struct {
	call    *Call
	convert func(any) kmsg.Response
	g       *partGather
	i       int
}

// slotQueue is the connection's calls in request order, a ring: a response completes
// its slot through its call, and the head leaves as soon as it is done.
type slotQueue struct {
	buf     []*slot
	head, n int
}

func (q *slotQueue) len() int { return q.n }

func (q *slotQueue) push(s *slot) {
	if q.n == len(q.buf) {
		nb := make([]*slot, max(8, 2*len(q.buf)))
		for i := range q.n {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = s
	q.n++
}

// front is the oldest slot; the queue must not be empty.
func (q *slotQueue) front() *slot { return q.buf[q.head] }

func (q *slotQueue) pop() {
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
}

func (q *slotQueue) each(fn func(*slot)) {
	for i := range q.n {
		fn(q.buf[(q.head+i)%len(q.buf)])
	}
}

// requestLabels are the labels of one kaas_requests_total child.
type requestLabels struct{ key, version, code int16 }

func (a *connActor) await(c *Call, convert func(any) kmsg.Response) actor.Promise {
	return a.awaiting.Await(a.ctx, pending{call: c, convert: convert})
}

func (a *connActor) onSettled(m *actor.Settled) {
	p, ok := a.awaiting.Take(m)
	if !ok {
		if !a.offerFetches(m) {
			partition.Unclaimed(m) // a late read of a fetch already answered
		}
		return
	}
	if p.g != nil {
		a.onGatherAnswer(p.g, p.i, m.Value)
		return
	}
	a.convertAndComplete(p.call, p.convert, m.Value)
}

// convertAndComplete turns an answer into call's response with convert and sends it; a
// panic in convert closes the connection.
func (a *connActor) convertAndComplete(call *Call, convert func(any) kmsg.Response, v any) {
	var resp kmsg.Response
	func() {
		defer func() {
			if r := recover(); r != nil {
				a.closeFor(closeConvertPanicked, closeDetail{key: call.Key, version: call.Version, panicked: r})
			}
		}()
		resp = convert(v)
	}()
	if resp == nil {
		return
	}
	a.complete(call, resp)
}

// complete records the response of call and sends every response that is now at the
// head of the queue, so responses leave in request order.
func (a *connActor) complete(c *Call, resp kmsg.Response) {
	if i := intercept.Load(); i != nil {
		i.i.Response(a.remote.String(), c, resp)
	}
	if c.done {
		a.log.Error().Int16("api_key", c.Key).Msg("request_completed_twice_second_response_ignored")
		return
	}
	c.done = true
	s := c.slot
	if s == nil {
		return
	}
	s.done = true
	a.granted -= s.grant
	s.grant = 0
	code := int16(0)
	if resp != nil {
		for _, p := range c.patches {
			p(resp)
		}
		resp.SetVersion(c.Version)
		if fr, ok := resp.(*kmsg.FetchResponse); ok {
			s.bytes, s.frame = encodeFetchResponse(c, fr)
			// The records are copied into the frame: nothing reads their buffers now.
			for _, b := range s.bufs {
				b.Release()
			}
			s.bufs = nil
		} else {
			s.bytes = encodeResponse(c, resp, c.api.sizeHint())
			c.api.noteSize(len(s.bytes))
		}
		s.built = int64(len(s.bytes))
		a.unwritten.Add(s.built)
		a.env.ResponseBytes.Add(s.built)
		code = c.api.topErrorCode(resp)
	}
	if a.met != nil {
		a.countRequest(c, code)
	}
	a.flush()
}

// countRequest counts c in kaas_requests_total and its duration, through the metric
// children this connection already looked up.
func (a *connActor) countRequest(c *Call, code int16) {
	l := requestLabels{key: c.Key, version: c.Version, code: code}
	ctr, ok := a.requests[l]
	if !ok {
		if a.requests == nil {
			a.requests = map[requestLabels]prometheus.Counter{}
		}
		ctr = a.met.Requests.WithLabelValues(c.api.name, metrics.Version(c.Version), strconv.Itoa(int(code)))
		a.requests[l] = ctr
	}
	ctr.Inc()
	obs, ok := a.seconds[c.Key]
	if !ok {
		if a.seconds == nil {
			a.seconds = map[int16]prometheus.Observer{}
		}
		obs = a.met.RequestSeconds.WithLabelValues(c.api.name)
		a.seconds[c.Key] = obs
	}
	obs.Observe(time.Since(c.start).Seconds())
}

func (a *connActor) flush() {
	for a.slots.len() > 0 {
		s := a.slots.front()
		if !s.done {
			break
		}
		a.slots.pop()
		if a.closed {
			s.frame.Release() // never to be written
			continue
		}
		if s.bytes != nil {
			s.built = 0 // the writer's to give back now
			if s.call != nil && s.call.tear {
				a.tear(s)
				a.out <- outFrame{b: s.bytes, pool: s.frame}
				return
			}
			a.out <- outFrame{b: s.bytes, pool: s.frame}
		} else {
			<-a.tokens
		}
	}
	a.resumeHeld(a.ctx)
	a.maybeFinishDrain(a.ctx)
}
