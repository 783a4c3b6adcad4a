package config

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Listener is one named listener: NAME://host:port.
type Listener struct {
	Name string
	Host string
	Port int
}

// Addr is host:port.
func (l Listener) Addr() string { return net.JoinHostPort(l.Host, strconv.Itoa(l.Port)) }

func (l Listener) String() string { return l.Name + "://" + l.Addr() }

// validateListeners checks listeners and advertised.listeners, and that each listener has
// a security protocol.
func (c *Config) validateListeners() error {
	if len(c.Listeners) == 0 {
		return fmt.Errorf("listeners: at least one listener is needed")
	}
	seen := map[string]bool{}
	for _, l := range c.Listeners {
		if seen[l.Name] {
			return fmt.Errorf("listeners: name %s used twice", l.Name)
		}
		seen[l.Name] = true
	}
	for _, l := range c.AdvertisedListeners {
		if !seen[l.Name] {
			return fmt.Errorf("advertised.listeners: %s names no listener", l.Name)
		}
		if unspecified(l.Host) {
			return fmt.Errorf("advertised.listeners: %s advertises %q, which no client can connect to: name this broker's address", l.Name, l.Host)
		}
	}
	for _, l := range c.Listeners {
		if err := c.checkSecurityProtocol(l.Name); err != nil {
			return err
		}
	}
	return nil
}

// Advertised returns the advertised listener of the named listener, falling back to the
// listener itself (with bound, the actual port, when it was 0).
func (c *Config) Advertised(name string, bound int) Listener {
	for _, l := range c.AdvertisedListeners {
		if l.Name == name {
			if l.Port == 0 {
				l.Port = bound
			}
			return l
		}
	}
	for _, l := range c.Listeners {
		if l.Name == name {
			if l.Port == 0 {
				l.Port = bound
			}
			if unspecified(l.Host) {
				// A listener on every interface is advertised under the host's name, as
				// Apache does (0.0.0.0 would send clients to their own machine).
				if h, err := os.Hostname(); err == nil && h != "" {
					l.Host = h
				}
			}
			return l
		}
	}
	return Listener{Name: name}
}

// unspecified reports a listener host that binds every interface.
func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// SecurityProtocols are the security protocols Apache Kafka names; kaas serves each.
var SecurityProtocols = []string{"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}

// DefaultSecurityProtocolMap is Apache's default: each protocol's name maps to itself.
func DefaultSecurityProtocolMap() map[string]string {
	m := make(map[string]string, len(SecurityProtocols))
	for _, p := range SecurityProtocols {
		m[p] = p
	}
	return m
}

// SecurityProtocol is the security protocol of the named listener ("" when unmapped).
func (c *Config) SecurityProtocol(name string) string {
	return c.SecurityProtocolMap[strings.ToUpper(name)]
}

// checkSecurityProtocol refuses a listener without a protocol: a listener named INTERNAL
// must say what it speaks.
func (c *Config) checkSecurityProtocol(name string) error {
	switch p := c.SecurityProtocol(name); p {
	case "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL":
		return nil
	case "":
		return fmt.Errorf("listener %s has no security protocol: name it after one (PLAINTEXT://host:port) or map it with --listener.security.protocol.map=%s:PLAINTEXT", name, name)
	default:
		return fmt.Errorf("listener %s: unknown security protocol %s", name, p)
	}
}

// UsesTLS says whether the named listener speaks TLS (SSL, SASL_SSL).
func (c *Config) UsesTLS(name string) bool {
	p := c.SecurityProtocol(name)
	return p == "SSL" || p == "SASL_SSL"
}

// UsesSASL says whether the named listener authenticates with SASL.
func (c *Config) UsesSASL(name string) bool {
	p := c.SecurityProtocol(name)
	return p == "SASL_PLAINTEXT" || p == "SASL_SSL"
}

// ParseSecurityProtocolMap reads "NAME:PROTOCOL,NAME2:PROTOCOL".
func ParseSecurityProtocolMap(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, proto, ok := strings.Cut(part, ":")
		name, proto = strings.ToUpper(strings.TrimSpace(name)), strings.ToUpper(strings.TrimSpace(proto))
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want NAME:PROTOCOL", part)
		}
		known := false
		for _, p := range SecurityProtocols {
			known = known || p == proto
		}
		if !known {
			return nil, fmt.Errorf("%q: unknown security protocol %q (want one of %s)", part, proto, strings.Join(SecurityProtocols, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("listener %s mapped twice", name)
		}
		out[name] = proto
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no NAME:PROTOCOL pair in %q", v)
	}
	return out, nil
}

func joinSecurityProtocolMap(m map[string]string) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + ":" + m[n]
	}
	return strings.Join(parts, ",")
}

// ParseListeners reads "NAME://host:port,NAME2://host:port".
func ParseListeners(v string) ([]Listener, error) {
	var out []Listener
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		// Not url.Parse: listener names such as SASL_SSL are no URL schemes.
		name, hostport, ok := strings.Cut(part, "://")
		if !ok || name == "" || hostport == "" || strings.ContainsAny(name, ":/") {
			return nil, fmt.Errorf("listener %q: want NAME://host:port", part)
		}
		host, port, err := net.SplitHostPort(hostport)
		if err != nil {
			return nil, fmt.Errorf("listener %q: %w", part, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("listener %q: bad port", part)
		}
		out = append(out, Listener{Name: strings.ToUpper(name), Host: host, Port: p})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no listener in %q", v)
	}
	return out, nil
}

func joinListeners(ls []Listener) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.String()
	}
	return strings.Join(parts, ",")
}
