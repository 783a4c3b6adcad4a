package broker

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"kaas/config"
)

// connQuotas counts the connections open, across the listeners and per IP address, as
// Apache's ConnectionQuotas does (max.connections, max.connections.per.ip and its
// overrides). A connection is counted in once accepted and admitted, and counted out
// once, when its actor's OnStop runs (or when it is closed unserved).
//
// Apache's limits per listener (listener.name.<name>.max.connections) are not kept: the
// settings here are one flag per key, with no per-listener keys. Apache lets connections
// of the inter-broker listener past max.connections; kaas has no inter-broker listener
// (peers only open and close a TCP connection to probe each other).
type connQuotas struct {
	max       int
	perIP     int
	overrides map[netip.Addr]int

	mu    sync.Mutex
	total int
	byIP  map[netip.Addr]int
	// freed is closed, and replaced, when a connection closes while max were open: the
	// listeners waiting for a slot look again.
	freed chan struct{}
}

// newConnQuotas resolves the overrides' host names (every address of a name gets its
// count; a name or address given twice keeps the smaller count).
func newConnQuotas(cfg *config.Config) (*connQuotas, error) {
	q := &connQuotas{max: int(cfg.MaxConnections), perIP: int(cfg.MaxConnectionsPerIP),
		overrides: map[netip.Addr]int{}, byIP: map[netip.Addr]int{}, freed: make(chan struct{})}
	hosts := make([]string, 0, len(cfg.MaxConnectionsPerIPOverrides))
	for h := range cfg.MaxConnectionsPerIPOverrides {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		n := int(cfg.MaxConnectionsPerIPOverrides[h])
		addrs, err := resolveHost(h)
		if err != nil {
			return nil, fmt.Errorf("max.connections.per.ip.overrides: %w", err)
		}
		for _, a := range addrs {
			if old, ok := q.overrides[a]; !ok || n < old {
				q.overrides[a] = n
			}
		}
	}
	return q, nil
}

func resolveHost(h string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(h); err == nil {
		return []netip.Addr{a.Unmap().WithZone("")}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", h, err)
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = a.Unmap().WithZone("")
	}
	return out, nil
}

// ipOf is the address a connection is counted under (the zero Addr when it has no IP).
func ipOf(nc net.Conn) netip.Addr {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// waitSlot takes one of the max connections, waiting until one closes when none is left
// (it reports whether it had to). It gives up, false, when quit closes.
func (q *connQuotas) waitSlot(quit <-chan struct{}, onWait func()) bool {
	waited := false
	for {
		q.mu.Lock()
		if q.total < q.max {
			q.total++
			q.mu.Unlock()
			return true
		}
		freed := q.freed
		q.mu.Unlock()
		if !waited {
			waited = true
			onWait()
		}
		select {
		case <-freed:
		case <-quit:
			return false
		}
	}
}

// admit counts a connection from ip in, on the slot waitSlot took; over the per-IP
// limit it gives the slot back and returns the limit.
func (q *connQuotas) admit(ip netip.Addr) (ok bool, limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	limit = q.perIP
	if n, over := q.overrides[ip]; over {
		limit = n
	}
	if q.byIP[ip] >= limit {
		q.releaseSlotLocked()
		return false, limit
	}
	q.byIP[ip]++
	return true, limit
}

// release counts out a connection admit counted in.
func (q *connQuotas) release(ip netip.Addr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.byIP[ip]--; q.byIP[ip] <= 0 {
		delete(q.byIP, ip)
	}
	q.releaseSlotLocked()
}

func (q *connQuotas) releaseSlotLocked() {
	q.total--
	if q.total == q.max-1 {
		close(q.freed)
		q.freed = make(chan struct{})
	}
}
