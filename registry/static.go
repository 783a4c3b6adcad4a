package registry

import (
	"context"
	"net"
	"strconv"
	"time"
)

// StaticPeer is one broker of a static registry and where it is reached.
type StaticPeer struct {
	ID        int32
	Endpoints map[string]Endpoint
}

// Static is the source of a fixed peer list. This broker is alive by definition; a
// peer is alive while a TCP connection to its first endpoint succeeds (probed every
// Interval, each probe bounded by the interval). Liveness for routing also needs the
// peer's lease (fence), which the ownership controller checks beside this.
type Static struct {
	Self     Broker
	Peers    []StaticPeer
	Probe    string // the listener name whose endpoint is dialled
	Interval time.Duration
	// Dial replaces net.Dialer.DialContext in tests.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Run probes until ctx ends. The first complete round marks the registry synced.
func (s *Static) Run(ctx context.Context, r *Registry) error {
	dial := s.Dial
	if dial == nil {
		d := &net.Dialer{}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		bs := make([]Broker, 0, len(s.Peers))
		for _, p := range s.Peers {
			if p.ID == s.Self.ID {
				self := s.Self
				self.Alive = true
				bs = append(bs, self)
				continue
			}
			bs = append(bs, Broker{ID: p.ID, Endpoints: p.Endpoints, Alive: s.probe(ctx, dial, p)})
		}
		if ctx.Err() != nil {
			return nil
		}
		r.Set(bs)
		r.MarkSynced()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Static) probe(ctx context.Context, dial func(context.Context, string) (net.Conn, error), p StaticPeer) bool {
	ep, ok := p.Endpoints[s.Probe]
	if !ok {
		for _, e := range p.Endpoints {
			ep, ok = e, true
			break
		}
	}
	if !ok {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, s.Interval)
	defer cancel()
	c, err := dial(pctx, net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))))
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
