// Package config holds every kaas setting: one flag per setting, named after Apache
// Kafka's config key where one exists, and the same setting from the environment as
// KAAS_ + the key in upper snake case (--group.initial.rebalance.delay.ms is
// KAAS_GROUP_INITIAL_REBALANCE_DELAY_MS). A flag on the command line wins over the
// environment, which wins over the default.
package config

import (
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"kaas/auth"
)

// Config is the whole broker configuration. Durations are kept as time.Duration; their
// flags are in the unit their Apache key names (ms, minutes).
type Config struct {
	// Broker.
	NodeID              int32
	Listeners           []Listener
	AdvertisedListeners []Listener
	// SecurityProtocolMap maps a listener name to its security protocol, as Apache's
	// listener.security.protocol.map does: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
	SecurityProtocolMap map[string]string
	DataDir             string
	DataFileMode        fs.FileMode // data.file.mode; directories derive theirs (datamode.DirFor)
	HTTPListen          string
	MaxRequestBytes     int32
	ConnectionsMaxIdle  time.Duration
	MaxInflightPerConn  int
	LogLevel            string
	LogFormat           string
	ShutdownTimeout     time.Duration

	// Memory a client can pin: bytes of partly read requests (broker-wide), bytes of
	// responses built but not yet written (per connection and broker-wide), and how long a
	// request frame may take to arrive once its first byte is read.
	QueuedMaxRequestBytes      int64
	ConnMaxQueuedResponseBytes int64
	QueuedMaxResponseBytes     int64
	SocketRequestReadTimeout   time.Duration

	// Apache's connection quotas: connections open across the listeners (at the limit the
	// listeners stop accepting until one closes), and from one IP address (one more is
	// closed once accepted), with per-host overrides keyed by host name or IP as given.
	MaxConnections               int32
	MaxConnectionsPerIP          int32
	MaxConnectionsPerIPOverrides map[string]int32

	// Consumer groups.
	GroupInitialRebalanceDelay time.Duration
	GroupMinSessionTimeout     time.Duration
	GroupMaxSessionTimeout     time.Duration
	GroupMaxSize               int32
	// KIP-394 pending member ids: per group and per broker (kaas settings; Apache has no
	// bound).
	GroupMaxPendingMembers      int32
	GroupMaxPendingMembersTotal int32
	// Transactional offsets (TxnOffsetCommit) waiting for their transaction's end, per
	// group (a kaas setting; Apache has no bound).
	GroupMaxPendingTxnOffsets int32
	GroupIdlePassivation      time.Duration
	// The consumer group protocol (KIP-848), under Apache's names: the session and
	// heartbeat interval the broker gives members with their bounds, the members a
	// consumer-protocol group may have, its server-side assignors (the first is the
	// default), and the protocols served (group.coordinator.rebalance.protocols: without
	// "consumer", ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION and clients fall
	// back to classic), and the online migration between the classic and consumer
	// protocols allowed (group.consumer.migration.policy: bidirectional, upgrade,
	// downgrade or disabled).
	GroupConsumerSessionTimeout       time.Duration
	GroupConsumerMinSessionTimeout    time.Duration
	GroupConsumerMaxSessionTimeout    time.Duration
	GroupConsumerHeartbeatInterval    time.Duration
	GroupConsumerMinHeartbeatInterval time.Duration
	GroupConsumerMaxHeartbeatInterval time.Duration
	GroupConsumerMaxSize              int32
	GroupConsumerAssignors            []string
	GroupRebalanceProtocols           []string
	GroupConsumerMigrationPolicy      string
	OffsetsRetention                  time.Duration
	OffsetsRetentionCheck             time.Duration
	OffsetMetadataMaxBytes            int
	OffsetsCheckpointInterval         time.Duration
	OffsetsIdlePassivation            time.Duration

	// Transactions (actors/txn).
	TransactionMaxTimeout     time.Duration
	TransactionalIDExpiration time.Duration
	TransactionMaxOpen        int32
	TransactionMaxPartitions  int32
	// Producer state per partition (actors/partition/producerstate.go).
	ProducerIDExpiration      time.Duration
	ProducerIDExpirationCheck time.Duration
	ProducerStateMaxEntries   int32

	// Topics and logs.
	AutoCreateTopics         bool
	NumPartitions            int32
	DefaultReplicationFactor int16
	MessageMaxBytes          int32
	LogSegmentBytes          int64
	LogRetention             time.Duration // <0: keep forever
	LogRetentionBytes        int64         // <0: no size limit
	LogFlushIntervalMessages int64         // 1: every acknowledged produce is fsynced first
	LogRetentionCheck        time.Duration
	// The log cleaner (compacted topics): the bytes of its key map, as Apache's dedupe
	// buffer (24 bytes a key at a 0.9 load), and the bytes a second it reads and writes,
	// every partition's passes together.
	LogCleanerDedupeBufferSize    int64
	LogCleanerIOMaxBytesPerSecond float64

	// Security (docs/security.md): TLS from PEM files, SASL mechanisms over
	// <data.dir>/__cluster/users.json, the ACL authorizer over acls.json.
	SSLCertificateLocation string // PEM certificate chain of SSL and SASL_SSL listeners
	SSLKeyLocation         string // PEM private key of that certificate
	SSLTruststoreLocation  string // PEM CA certificates client certificates are checked against
	SSLClientAuth          string // none | requested | required
	SASLMechanisms         []string
	FailedAuthDelay        time.Duration
	SASLMaxReceiveSize     int32  // largest frame read before SASL authentication
	Authorizer             string // "" (off) | simple
	SuperUsers             string // semicolon-separated principals
	AllowEveryoneIfNoACL   bool
	SecurityFilesPoll      time.Duration

	// Cluster.
	Registry          string // dev | static | kubernetes
	RegistryPeers     []Peer // static: every broker of the cluster, this one included
	ClusterSize       int    // the full broker set; 0: the peer count (static) or required (kubernetes)
	RegistryService   string // kubernetes: the headless Service whose EndpointSlices list the brokers
	RegistryNamespace string // kubernetes: its namespace ("" : the pod's own)
	// RegistryKubeconfig is the kubeconfig file of the kubernetes registry ("": in
	// cluster, then the usual kubectl rules).
	RegistryKubeconfig string
	RegistryProbe      time.Duration
	LeaseDuration      time.Duration
	LeaseRenew         time.Duration
	// PauseWatchdog: in a cluster, a second process ends a paused broker's client
	// connections once its lease has ended (package watchdog).
	PauseWatchdog bool

	// Inter-broker requests (package peer; docs/security.md, Between brokers).
	// InterBrokerListener names the listener peers are reached on ("": the first).
	InterBrokerListener string
	// InterBrokerSASLMechanism, Username and PasswordFile authenticate this broker to
	// its peers when that listener is SASL; the password is read from the file at start
	// and never logged.
	InterBrokerSASLMechanism    string
	InterBrokerSASLUsername     string
	InterBrokerSASLPasswordFile string
	InterBrokerRequestTimeout   time.Duration
	InterBrokerMaxInFlight      int32
}

// Peer is one broker of a static registry: id@host:port (its first listener).
type Peer struct {
	ID   int32
	Host string
	Port int
}

// ParsePeers reads "0@127.0.0.1:9092,1@127.0.0.1:9093".
func ParsePeers(v string) ([]Peer, error) {
	var out []Peer
	seen := map[int32]bool{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		at := strings.IndexByte(part, '@')
		if at < 0 {
			return nil, fmt.Errorf("peer %q: want id@host:port", part)
		}
		id, err := strconv.ParseInt(part[:at], 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("peer %q: id must be a non-negative number", part)
		}
		host, port, err := net.SplitHostPort(part[at+1:])
		if err != nil {
			return nil, fmt.Errorf("peer %q: %w", part, err)
		}
		pn, err := strconv.Atoi(port)
		if err != nil || pn <= 0 || pn > 65535 {
			return nil, fmt.Errorf("peer %q: bad port", part)
		}
		if seen[int32(id)] {
			return nil, fmt.Errorf("peer id %d twice", id)
		}
		seen[int32(id)] = true
		out = append(out, Peer{ID: int32(id), Host: host, Port: pn})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func joinPeers(ps []Peer) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d@%s", p.ID, net.JoinHostPort(p.Host, strconv.Itoa(p.Port)))
	}
	return strings.Join(parts, ",")
}

// Default is the embedded single broker a developer runs on a laptop.
func Default() Config {
	return Config{
		NodeID:              0,
		Listeners:           []Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 9092}},
		SecurityProtocolMap: DefaultSecurityProtocolMap(),
		DataDir:             "./data",
		DataFileMode:        0o600,
		HTTPListen:          "127.0.0.1:9644",
		MaxRequestBytes:     104857600,
		ConnectionsMaxIdle:  600000 * time.Millisecond,
		MaxInflightPerConn:  64,
		LogLevel:            "info",
		LogFormat:           "",
		ShutdownTimeout:     8 * time.Second,

		InterBrokerSASLMechanism:  "SCRAM-SHA-512",
		InterBrokerRequestTimeout: 10 * time.Second,
		InterBrokerMaxInFlight:    64,

		QueuedMaxRequestBytes:      256 << 20,
		ConnMaxQueuedResponseBytes: 8 << 20,
		QueuedMaxResponseBytes:     256 << 20,
		SocketRequestReadTimeout:   60000 * time.Millisecond,

		MaxConnections:      math.MaxInt32,
		MaxConnectionsPerIP: math.MaxInt32,

		GroupInitialRebalanceDelay:        3000 * time.Millisecond,
		GroupMinSessionTimeout:            6000 * time.Millisecond,
		GroupMaxSessionTimeout:            1800000 * time.Millisecond,
		GroupMaxSize:                      math.MaxInt32,
		GroupMaxPendingMembers:            1000,
		GroupMaxPendingMembersTotal:       20000,
		GroupMaxPendingTxnOffsets:         100000,
		GroupIdlePassivation:              300000 * time.Millisecond,
		GroupConsumerSessionTimeout:       45000 * time.Millisecond,
		GroupConsumerMinSessionTimeout:    45000 * time.Millisecond,
		GroupConsumerMaxSessionTimeout:    60000 * time.Millisecond,
		GroupConsumerHeartbeatInterval:    5000 * time.Millisecond,
		GroupConsumerMinHeartbeatInterval: 5000 * time.Millisecond,
		GroupConsumerMaxHeartbeatInterval: 15000 * time.Millisecond,
		GroupConsumerMaxSize:              math.MaxInt32,
		GroupConsumerAssignors:            []string{"uniform", "range"},
		GroupRebalanceProtocols:           []string{"classic", "consumer"},
		GroupConsumerMigrationPolicy:      "bidirectional",
		OffsetsRetention:                  10080 * time.Minute,
		OffsetsRetentionCheck:             600000 * time.Millisecond,
		OffsetMetadataMaxBytes:            4096,
		OffsetsCheckpointInterval:         2000 * time.Millisecond,
		OffsetsIdlePassivation:            30000 * time.Millisecond,

		TransactionMaxTimeout:     900000 * time.Millisecond,
		TransactionalIDExpiration: 604800000 * time.Millisecond,
		TransactionMaxOpen:        100000,
		TransactionMaxPartitions:  10000,
		ProducerIDExpiration:      86400000 * time.Millisecond,
		ProducerIDExpirationCheck: 600000 * time.Millisecond,
		ProducerStateMaxEntries:   10000,

		AutoCreateTopics:              true,
		NumPartitions:                 1,
		DefaultReplicationFactor:      1,
		MessageMaxBytes:               1048588,
		LogSegmentBytes:               1073741824,
		LogRetention:                  168 * time.Hour,
		LogRetentionBytes:             -1,
		LogFlushIntervalMessages:      1,
		LogRetentionCheck:             300000 * time.Millisecond,
		LogCleanerDedupeBufferSize:    128 << 20,
		LogCleanerIOMaxBytesPerSecond: math.MaxFloat64,

		SSLClientAuth:      "none",
		SASLMechanisms:     []string{"SCRAM-SHA-256", "SCRAM-SHA-512"},
		FailedAuthDelay:    100 * time.Millisecond,
		SASLMaxReceiveSize: 524288,
		SecurityFilesPoll:  1000 * time.Millisecond,

		Registry:      "dev",
		RegistryProbe: 500 * time.Millisecond,
		LeaseDuration: 3000 * time.Millisecond,
		LeaseRenew:    500 * time.Millisecond,
		PauseWatchdog: true,
	}
}

// setting is one row of the table: its key, help, and how to read and show it.
type setting struct {
	key   string
	help  string
	set   func(c *Config, v string) error
	value func(c *Config) string
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func parseMS(dst *time.Duration) func(*Config, string) error {
	return func(_ *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return err
		}
		*dst = time.Duration(n) * time.Millisecond
		return nil
	}
}

// settings returns the table bound to c (the setters write into c).
func settings(c *Config) []setting {
	intSetting := func(key, help string, dst *int32) setting {
		return setting{key, help, func(_ *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 32)
			*dst = int32(n)
			return err
		}, func(*Config) string { return strconv.FormatInt(int64(*dst), 10) }}
	}
	int64Setting := func(key, help string, dst *int64) setting {
		return setting{key, help, func(_ *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			*dst = n
			return err
		}, func(*Config) string { return strconv.FormatInt(*dst, 10) }}
	}
	msSetting := func(key, help string, dst *time.Duration) setting {
		return setting{key, help, parseMS(dst), func(*Config) string { return ms(*dst) }}
	}
	strSetting := func(key, help string, dst *string) setting {
		return setting{key, help, func(_ *Config, v string) error { *dst = v; return nil },
			func(*Config) string { return *dst }}
	}
	return []setting{
		intSetting("node.id", "this broker's id", &c.NodeID),
		{"listeners", "comma-separated NAME://host:port listeners (port 0 picks a free port)",
			func(c *Config, v string) (err error) { c.Listeners, err = ParseListeners(v); return err },
			func(c *Config) string { return joinListeners(c.Listeners) }},
		{"advertised.listeners", "listeners as clients should reach them (default: listeners)",
			func(c *Config, v string) (err error) { c.AdvertisedListeners, err = ParseListeners(v); return err },
			func(c *Config) string { return joinListeners(c.AdvertisedListeners) }},
		{"listener.security.protocol.map", "comma-separated NAME:PROTOCOL pairs giving each listener its security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
			func(c *Config, v string) (err error) {
				c.SecurityProtocolMap, err = ParseSecurityProtocolMap(v)
				return err
			},
			func(c *Config) string { return joinSecurityProtocolMap(c.SecurityProtocolMap) }},
		strSetting("data.dir", "directory for committed offsets, logs and cluster state", &c.DataDir),
		{"data.file.mode", "octal permissions of the files made under data.dir; their directories get x where files get r (0640 gives 0750)",
			func(c *Config, v string) error {
				n, err := strconv.ParseUint(v, 8, 32)
				if err != nil || n&^0o777 != 0 || n&0o600 != 0o600 {
					return fmt.Errorf("want octal permissions with owner read and write, like 0600 or 0640")
				}
				c.DataFileMode = fs.FileMode(n)
				return nil
			},
			func(c *Config) string { return fmt.Sprintf("%04o", uint32(c.DataFileMode.Perm())) }},
		strSetting("http.listen", "host:port of /healthz, /readyz and /metrics (empty: off)", &c.HTTPListen),
		intSetting("socket.request.max.bytes", "largest request frame accepted; bigger closes the connection", &c.MaxRequestBytes),
		msSetting("connections.max.idle.ms", "close a connection idle this long", &c.ConnectionsMaxIdle),
		{"connection.max.inflight.requests", "requests read ahead per connection before reading pauses",
			func(c *Config, v string) (err error) { c.MaxInflightPerConn, err = strconv.Atoi(v); return err },
			func(c *Config) string { return strconv.Itoa(c.MaxInflightPerConn) }},
		int64Setting("queued.max.request.bytes", "bytes partly read requests may hold across the broker before reading waits (Apache's default, -1, is unbounded; here it must be positive)", &c.QueuedMaxRequestBytes),
		int64Setting("connection.max.queued.response.bytes", "bytes of responses built but not yet written one connection may hold before its requests wait (no Apache key: Apache mutes a connection while a response is outstanding)", &c.ConnMaxQueuedResponseBytes),
		int64Setting("queued.max.response.bytes", "bytes of responses built but not yet written across the broker before Fetches wait (no Apache key)", &c.QueuedMaxResponseBytes),
		msSetting("socket.request.read.timeout.ms", "close a connection whose request frame has not arrived whole this long after its first byte (no Apache key)", &c.SocketRequestReadTimeout),
		intSetting("max.connections", "most connections open across the listeners; at the limit the listeners stop accepting until one closes (2147483647: no limit)", &c.MaxConnections),
		intSetting("max.connections.per.ip", "most connections open from one IP address; one more is closed as soon as it is accepted (0, allowed only with overrides, lets in only the hosts listed there)", &c.MaxConnectionsPerIP),
		{"max.connections.per.ip.overrides", "comma-separated host:count pairs (host name or IP; a name is resolved at start) setting max.connections.per.ip for those addresses",
			func(c *Config, v string) (err error) {
				c.MaxConnectionsPerIPOverrides, err = ParseConnectionOverrides(v)
				return err
			},
			func(c *Config) string { return joinConnectionOverrides(c.MaxConnectionsPerIPOverrides) }},
		strSetting("log.level", "debug, info, warn or error", &c.LogLevel),
		strSetting("log.format", "json or console (default: console on a terminal, else json)", &c.LogFormat),
		msSetting("shutdown.timeout.ms", "how long a graceful stop may drain before it forces", &c.ShutdownTimeout),

		msSetting("group.initial.rebalance.delay.ms", "wait for more members before the first rebalance of an empty group", &c.GroupInitialRebalanceDelay),
		msSetting("group.min.session.timeout.ms", "smallest session timeout a member may ask for", &c.GroupMinSessionTimeout),
		msSetting("group.max.session.timeout.ms", "largest session timeout a member may ask for", &c.GroupMaxSessionTimeout),
		intSetting("group.max.size", "most members one group may have", &c.GroupMaxSize),
		intSetting("group.max.pending.txn.offsets", "most transactional offsets (TxnOffsetCommit) one group holds for transactions not yet committed or aborted; past it TxnOffsetCommit gets TRANSACTION_ABORTABLE (INVALID_TXN_STATE before v4)", &c.GroupMaxPendingTxnOffsets),
		intSetting("group.max.pending.members", "most member ids one group hands out (KIP-394) that were not joined with yet; past it a JoinGroup without a member id gets GROUP_MAX_SIZE_REACHED", &c.GroupMaxPendingMembers),
		intSetting("group.max.pending.members.total", "most such pending member ids of all groups of the broker; past it COORDINATOR_LOAD_IN_PROGRESS (retriable)", &c.GroupMaxPendingMembersTotal),
		msSetting("group.idle.passivation.ms", "stop the actor of an empty group idle this long (its offsets stay on disk)", &c.GroupIdlePassivation),
		msSetting("group.consumer.session.timeout.ms", "session timeout of consumer-protocol members (KIP-848): a member silent this long is fenced", &c.GroupConsumerSessionTimeout),
		msSetting("group.consumer.min.session.timeout.ms", "lower bound of group.consumer.session.timeout.ms", &c.GroupConsumerMinSessionTimeout),
		msSetting("group.consumer.max.session.timeout.ms", "upper bound of group.consumer.session.timeout.ms", &c.GroupConsumerMaxSessionTimeout),
		msSetting("group.consumer.heartbeat.interval.ms", "heartbeat interval the broker gives consumer-protocol members", &c.GroupConsumerHeartbeatInterval),
		msSetting("group.consumer.min.heartbeat.interval.ms", "lower bound of group.consumer.heartbeat.interval.ms", &c.GroupConsumerMinHeartbeatInterval),
		msSetting("group.consumer.max.heartbeat.interval.ms", "upper bound of group.consumer.heartbeat.interval.ms", &c.GroupConsumerMaxHeartbeatInterval),
		intSetting("group.consumer.max.size", "most members one consumer-protocol group may have", &c.GroupConsumerMaxSize),
		{"group.consumer.assignors", "server-side assignors of consumer-protocol groups, comma-separated (uniform, range); the first is the default",
			func(c *Config, v string) (err error) { c.GroupConsumerAssignors, err = parseAssignors(v); return err },
			func(c *Config) string { return strings.Join(c.GroupConsumerAssignors, ",") }},
		{"group.coordinator.rebalance.protocols", "group protocols served, comma-separated (classic, consumer); without consumer, ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION and clients fall back to classic",
			func(c *Config, v string) (err error) { c.GroupRebalanceProtocols, err = parseProtocols(v); return err },
			func(c *Config) string { return strings.Join(c.GroupRebalanceProtocols, ",") }},
		{"group.consumer.migration.policy", "online migration of groups with members between the classic and consumer protocols: bidirectional, upgrade (a consumer-protocol member joining a classic group converts it), downgrade (the last consumer-protocol member leaving converts it back) or disabled; empty groups convert either way regardless",
			func(c *Config, v string) (err error) {
				c.GroupConsumerMigrationPolicy, err = parseMigrationPolicy(v)
				return err
			},
			func(c *Config) string { return c.GroupConsumerMigrationPolicy }},
		{"offsets.retention.minutes", "keep committed offsets of an empty group this long",
			func(c *Config, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				c.OffsetsRetention = time.Duration(n) * time.Minute
				return err
			},
			func(c *Config) string { return strconv.FormatInt(int64(c.OffsetsRetention/time.Minute), 10) }},
		msSetting("offsets.retention.check.interval.ms", "how often expired offsets are removed", &c.OffsetsRetentionCheck),
		msSetting("offsets.checkpoint.interval.ms", "how long a group's commits wait in the offsets journal before its file is rewritten with them", &c.OffsetsCheckpointInterval),
		msSetting("offsets.idle.passivation.ms", "stop the offsets actor of a live group whose file holds everything and that saw no offsets request this long (it reloads the file on the next; 0 never); a broker alone only: in a cluster every load takes the group over again, so groups keep theirs", &c.OffsetsIdlePassivation),
		{"offset.metadata.max.bytes", "largest metadata string of a committed offset",
			func(c *Config, v string) (err error) { c.OffsetMetadataMaxBytes, err = strconv.Atoi(v); return err },
			func(c *Config) string { return strconv.Itoa(c.OffsetMetadataMaxBytes) }},

		msSetting("transaction.max.timeout.ms", "largest transaction timeout a producer may ask for; a larger one gets INVALID_TRANSACTION_TIMEOUT", &c.TransactionMaxTimeout),
		msSetting("transactional.id.expiration.ms", "forget a transactional id idle this long with no transaction running", &c.TransactionalIDExpiration),
		intSetting("transaction.max.open", "most transactions running at once on the coordinator; past it a new transaction gets COORDINATOR_LOAD_IN_PROGRESS (retriable; no Apache key)", &c.TransactionMaxOpen),
		intSetting("transaction.max.partitions", "most partitions and groups one transaction may hold; past it INVALID_TXN_STATE (no Apache key)", &c.TransactionMaxPartitions),
		msSetting("producer.id.expiration.ms", "forget a partition's producer idle this long with no open transaction there (its duplicate detection ends)", &c.ProducerIDExpiration),
		msSetting("producer.id.expiration.check.interval.ms", "how often partitions look for expired producers", &c.ProducerIDExpirationCheck),
		intSetting("producer.state.max.entries", "most producers one partition keeps; a new one past it evicts the longest idle without an open transaction (no Apache key)", &c.ProducerStateMaxEntries),

		{"auto.create.topics.enable", "create a topic when a client asks for one that does not exist",
			func(c *Config, v string) (err error) { c.AutoCreateTopics, err = strconv.ParseBool(v); return err },
			func(c *Config) string { return strconv.FormatBool(c.AutoCreateTopics) }},
		intSetting("num.partitions", "partitions of an auto-created topic", &c.NumPartitions),
		{"default.replication.factor", "replication factor recorded for auto-created topics",
			func(c *Config, v string) error {
				n, err := strconv.ParseInt(v, 10, 16)
				c.DefaultReplicationFactor = int16(n)
				return err
			},
			func(c *Config) string { return strconv.Itoa(int(c.DefaultReplicationFactor)) }},
		intSetting("message.max.bytes", "largest record batch a producer may send; dynamic: a BROKER resource may change it at runtime", &c.MessageMaxBytes),
		int64Setting("log.segment.bytes", "roll a partition's segment at this size; dynamic: a BROKER resource may change it at runtime", &c.LogSegmentBytes),
		{"log.retention.ms", "delete segments older than this (-1: forever); dynamic: a BROKER resource may change it at runtime",
			func(c *Config, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				c.LogRetention = time.Duration(n) * time.Millisecond
				return err
			},
			func(c *Config) string {
				if c.LogRetention < 0 {
					return "-1"
				}
				return ms(c.LogRetention)
			}},
		int64Setting("log.retention.bytes", "delete old segments past this size per partition (-1: no limit); dynamic: a BROKER resource may change it at runtime", &c.LogRetentionBytes),
		int64Setting("log.flush.interval.messages", "fsync after this many appended batches; 1 makes every acknowledged produce durable; dynamic: a BROKER resource may change it at runtime", &c.LogFlushIntervalMessages),
		msSetting("log.retention.check.interval.ms", "how often log retention runs", &c.LogRetentionCheck),
		int64Setting("log.cleaner.dedupe.buffer.size", "bytes of the log cleaner's key map per pass (24 bytes a key at a 0.9 load); a fuller dirty range is cleaned over several passes", &c.LogCleanerDedupeBufferSize),
		{"log.cleaner.io.max.bytes.per.second", "bytes a second the log cleaner reads and writes, all compacted partitions together",
			func(c *Config, v string) error {
				f, err := strconv.ParseFloat(v, 64)
				c.LogCleanerIOMaxBytesPerSecond = f
				return err
			},
			func(c *Config) string { return strconv.FormatFloat(c.LogCleanerIOMaxBytesPerSecond, 'g', -1, 64) }},

		strSetting("ssl.certificate.location", "PEM file of the certificate chain SSL and SASL_SSL listeners present (the chart mounts a TLS Secret's tls.crt)", &c.SSLCertificateLocation),
		strSetting("ssl.key.location", "PEM file of that certificate's private key (tls.key)", &c.SSLKeyLocation),
		strSetting("ssl.truststore.location", "PEM file of the CA certificates client certificates are verified against (ca.crt; default: the system's)", &c.SSLTruststoreLocation),
		strSetting("ssl.client.auth", "client certificates on SSL listeners: none, requested or required; a verified certificate's subject is the principal (User:CN=...)", &c.SSLClientAuth),
		{"sasl.enabled.mechanisms", "SASL mechanisms of SASL_PLAINTEXT and SASL_SSL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (users in <data.dir>/__cluster/users.json)",
			func(c *Config, v string) (err error) { c.SASLMechanisms, err = auth.ParseMechanisms(v); return err },
			func(c *Config) string { return strings.Join(c.SASLMechanisms, ",") }},
		intSetting("sasl.server.max.receive.size", "largest request frame a SASL listener reads before the client authenticated; bigger closes the connection", &c.SASLMaxReceiveSize),
		msSetting("connection.failed.authentication.delay.ms", "how long a connection that failed SASL authentication stays open after its answer before it is closed", &c.FailedAuthDelay),
		strSetting("authorizer", "ACL authorizer: empty (off: every request allowed) or simple (ACLs in <data.dir>/__cluster/acls.json, Apache's AclAuthorizer rules)", &c.Authorizer),
		strSetting("super.users", "semicolon-separated principals allowed everything by the authorizer (User:admin;User:CN=ops)", &c.SuperUsers),
		{"allow.everyone.if.no.acl.found", "with the authorizer, allow any principal on a resource no ACL names",
			func(c *Config, v string) (err error) { c.AllowEveryoneIfNoACL, err = strconv.ParseBool(v); return err },
			func(c *Config) string { return strconv.FormatBool(c.AllowEveryoneIfNoACL) }},
		msSetting("security.files.poll.interval.ms", "how often acls.json and users.json are checked for a change another broker or an operator made (no Apache key)", &c.SecurityFilesPoll),

		strSetting("registry", "where the broker set comes from: dev (this broker alone), static (--registry.peers) or kubernetes (EndpointSlices of --registry.service)", &c.Registry),
		{"registry.peers", "static registry: every broker as id@host:port, comma-separated, this one included (kubernetes: where to reach each ordinal instead of its pod's DNS name)",
			func(c *Config, v string) (err error) { c.RegistryPeers, err = ParsePeers(v); return err },
			func(c *Config) string { return joinPeers(c.RegistryPeers) }},
		{"cluster.size", "brokers in the full broker set that groups and partitions hash over (default: the peer count)",
			func(c *Config, v string) (err error) { c.ClusterSize, err = strconv.Atoi(v); return err },
			func(c *Config) string { return strconv.Itoa(c.ClusterSize) }},
		strSetting("registry.service", "kubernetes registry: the headless Service of the brokers", &c.RegistryService),
		strSetting("registry.namespace", "kubernetes registry: the Service's namespace (default: the pod's own)", &c.RegistryNamespace),
		strSetting("registry.kubeconfig", "kubernetes registry: a kubeconfig file (default: the pod's service account)", &c.RegistryKubeconfig),
		msSetting("registry.probe.interval.ms", "static registry: how often each peer is probed", &c.RegistryProbe),
		msSetting("lease.duration.ms", "how long a broker's lease lasts unrenewed; a peer adopts its groups and partitions only after this", &c.LeaseDuration),
		msSetting("lease.renew.interval.ms", "how often a broker renews its lease", &c.LeaseRenew),
		{"pause.watchdog.enable", "in a cluster (registry static or kubernetes), run a watchdog process that ends this broker's client connections and refuses new ones once it stops running past its lease (SIGSTOP, a stalled process), as a killed broker's would end (no Apache key)",
			func(c *Config, v string) (err error) { c.PauseWatchdog, err = strconv.ParseBool(v); return err },
			func(c *Config) string { return strconv.FormatBool(c.PauseWatchdog) }},
		strSetting("inter.broker.listener.name", "the listener a broker reaches its peers on, for requests it forwards to them (default: the first listener; with --registry.peers it must be the first)", &c.InterBrokerListener),
		strSetting("sasl.mechanism.inter.broker.protocol", "when the inter-broker listener is SASL: the mechanism a broker authenticates to its peers with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", &c.InterBrokerSASLMechanism),
		strSetting("inter.broker.sasl.username", "when the inter-broker listener is SASL: the user a broker authenticates to its peers as (no Apache key: Apache reads it from the listener's JAAS config)", &c.InterBrokerSASLUsername),
		strSetting("inter.broker.sasl.password.file", "when the inter-broker listener is SASL: a file holding that user's password on its first line (read at start, never logged; no Apache key)", &c.InterBrokerSASLPasswordFile),
		msSetting("inter.broker.request.timeout.ms", "how long a request to a peer broker may take, connection and authentication included (no Apache key)", &c.InterBrokerRequestTimeout),
		intSetting("inter.broker.max.in.flight.requests", "requests to peer brokers out at once; one more is answered as if the peer were unreachable (no Apache key)", &c.InterBrokerMaxInFlight),
	}
}

// EnvName is the environment variable of a key: KAAS_ + upper snake case.
func EnvName(key string) string {
	return "KAAS_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// Parse reads args (without the program name) and the environment into a Config.
// It returns flag.ErrHelp after printing the help to out for -h/--help.
func Parse(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	c := Default()
	table := settings(&c)
	fs := flag.NewFlagSet("kaas", flag.ContinueOnError)
	fs.SetOutput(out)
	for _, s := range table {
		s := s
		fs.Func(s.key, s.help, func(v string) error { return s.set(&c, v) })
	}
	fs.Usage = func() { PrintHelp(out) }
	// Environment first, so flags on the command line win.
	for _, s := range table {
		if v := getenv(EnvName(s.key)); v != "" {
			if err := s.set(&c, v); err != nil {
				return c, fmt.Errorf("%s=%q: %w", EnvName(s.key), v, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, c.Validate()
}

// Validate checks what a flag's type cannot.
func (c *Config) Validate() error {
	if err := c.validateListeners(); err != nil {
		return err
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	if err := c.validateInterBroker(); err != nil {
		return err
	}
	switch {
	case c.MaxRequestBytes <= 0:
		return fmt.Errorf("socket.request.max.bytes must be positive")
	case c.MaxInflightPerConn <= 0:
		return fmt.Errorf("connection.max.inflight.requests must be positive")
	case c.QueuedMaxRequestBytes <= 0:
		return fmt.Errorf("queued.max.request.bytes must be positive")
	case c.ConnMaxQueuedResponseBytes <= 0:
		return fmt.Errorf("connection.max.queued.response.bytes must be positive")
	case c.QueuedMaxResponseBytes <= 0:
		return fmt.Errorf("queued.max.response.bytes must be positive")
	case c.SocketRequestReadTimeout <= 0:
		return fmt.Errorf("socket.request.read.timeout.ms must be positive")
	case c.MaxConnections < 1:
		return fmt.Errorf("max.connections must be at least 1")
	case c.MaxConnectionsPerIP < 0:
		return fmt.Errorf("max.connections.per.ip must not be negative")
	case c.MaxConnectionsPerIP == 0 && len(c.MaxConnectionsPerIPOverrides) == 0:
		return fmt.Errorf("max.connections.per.ip can be zero only with max.connections.per.ip.overrides (else no client could connect)")
	case c.GroupMinSessionTimeout > c.GroupMaxSessionTimeout:
		return fmt.Errorf("group.min.session.timeout.ms is above group.max.session.timeout.ms")
	case c.GroupMaxSize < 1:
		return fmt.Errorf("group.max.size must be at least 1")
	case c.GroupConsumerMinSessionTimeout > c.GroupConsumerMaxSessionTimeout ||
		c.GroupConsumerSessionTimeout < c.GroupConsumerMinSessionTimeout ||
		c.GroupConsumerSessionTimeout > c.GroupConsumerMaxSessionTimeout:
		return fmt.Errorf("group.consumer.session.timeout.ms must lie within group.consumer.min.session.timeout.ms and group.consumer.max.session.timeout.ms")
	case c.GroupConsumerMinHeartbeatInterval > c.GroupConsumerMaxHeartbeatInterval ||
		c.GroupConsumerHeartbeatInterval < c.GroupConsumerMinHeartbeatInterval ||
		c.GroupConsumerHeartbeatInterval > c.GroupConsumerMaxHeartbeatInterval:
		return fmt.Errorf("group.consumer.heartbeat.interval.ms must lie within group.consumer.min.heartbeat.interval.ms and group.consumer.max.heartbeat.interval.ms")
	case c.GroupConsumerHeartbeatInterval <= 0 || c.GroupConsumerHeartbeatInterval >= c.GroupConsumerSessionTimeout:
		// Apache GroupCoordinatorConfig: the heartbeat interval must be below the session.
		return fmt.Errorf("group.consumer.heartbeat.interval.ms must be positive and below group.consumer.session.timeout.ms")
	case c.GroupConsumerMaxSize < 1:
		return fmt.Errorf("group.consumer.max.size must be at least 1")
	case c.GroupMaxPendingMembers < 1 || c.GroupMaxPendingMembersTotal < 1:
		return fmt.Errorf("group.max.pending.members and group.max.pending.members.total must be at least 1")
	case c.GroupMaxPendingTxnOffsets < 1:
		return fmt.Errorf("group.max.pending.txn.offsets must be at least 1")
	case c.OffsetsRetention < time.Minute:
		return fmt.Errorf("offsets.retention.minutes must be at least 1")
	case c.OffsetsCheckpointInterval <= 0:
		return fmt.Errorf("offsets.checkpoint.interval.ms must be positive")
	case c.OffsetsIdlePassivation < 0:
		return fmt.Errorf("offsets.idle.passivation.ms must not be negative")
	case c.TransactionMaxTimeout < time.Millisecond:
		return fmt.Errorf("transaction.max.timeout.ms must be at least 1")
	case c.TransactionalIDExpiration < time.Millisecond:
		return fmt.Errorf("transactional.id.expiration.ms must be at least 1")
	case c.TransactionMaxOpen < 1 || c.TransactionMaxPartitions < 1:
		return fmt.Errorf("transaction.max.open and transaction.max.partitions must be at least 1")
	case c.ProducerIDExpiration < time.Millisecond || c.ProducerIDExpirationCheck < time.Millisecond:
		return fmt.Errorf("producer.id.expiration.ms and producer.id.expiration.check.interval.ms must be at least 1")
	case c.ProducerStateMaxEntries < 1:
		return fmt.Errorf("producer.state.max.entries must be at least 1")
	case c.NumPartitions < 1:
		return fmt.Errorf("num.partitions must be at least 1")
	case c.LogFlushIntervalMessages < 1:
		return fmt.Errorf("log.flush.interval.messages must be at least 1")
	case c.LogCleanerDedupeBufferSize < 24:
		return fmt.Errorf("log.cleaner.dedupe.buffer.size must hold at least one key (24 bytes)")
	case !(c.LogCleanerIOMaxBytesPerSecond > 0):
		return fmt.Errorf("log.cleaner.io.max.bytes.per.second must be positive")
	}
	switch c.LogFormat {
	case "", "json", "console":
	default:
		return fmt.Errorf("log.format must be json or console")
	}
	return c.validateCluster()
}

func (c *Config) validateCluster() error {
	if c.NodeID < 0 {
		return fmt.Errorf("node.id must not be negative")
	}
	if c.LeaseRenew <= 0 || c.LeaseDuration <= 0 {
		return fmt.Errorf("lease.duration.ms and lease.renew.interval.ms must be positive")
	}
	if c.LeaseRenew*2 > c.LeaseDuration {
		return fmt.Errorf("lease.renew.interval.ms must be at most half of lease.duration.ms, so a renewal can fail once without the lease lapsing")
	}
	if c.RegistryProbe <= 0 {
		return fmt.Errorf("registry.probe.interval.ms must be positive")
	}
	switch c.Registry {
	case "dev":
		if len(c.RegistryPeers) > 0 {
			return fmt.Errorf("registry.peers is for --registry=static (or kubernetes, as addresses by ordinal)")
		}
	case "static":
		if len(c.RegistryPeers) == 0 {
			return fmt.Errorf("registry=static needs registry.peers")
		}
		self := false
		for _, p := range c.RegistryPeers {
			self = self || p.ID == c.NodeID
		}
		if !self {
			return fmt.Errorf("registry.peers does not list this broker (node.id %d)", c.NodeID)
		}
		if c.ClusterSize == 0 {
			c.ClusterSize = int(c.RegistryPeers[len(c.RegistryPeers)-1].ID) + 1
		}
		for _, p := range c.RegistryPeers {
			if int(p.ID) >= c.ClusterSize {
				return fmt.Errorf("registry.peers: id %d is outside cluster.size %d", p.ID, c.ClusterSize)
			}
		}
	case "kubernetes":
		if c.LeaseDuration%time.Second != 0 {
			return fmt.Errorf("registry=kubernetes: lease.duration.ms must be whole seconds (a Lease holds seconds)")
		}
		if c.RegistryService == "" {
			return fmt.Errorf("registry=kubernetes needs registry.service (the brokers' headless Service)")
		}
		if c.ClusterSize < 1 {
			return fmt.Errorf("registry=kubernetes needs cluster.size (the StatefulSet's replicas)")
		}
	default:
		return fmt.Errorf("registry must be dev, static or kubernetes")
	}
	if c.Registry != "dev" && int(c.NodeID) >= c.ClusterSize {
		return fmt.Errorf("node.id %d is outside cluster.size %d", c.NodeID, c.ClusterSize)
	}
	return nil
}

// validateSecurity checks the TLS, SASL and authorizer settings against the listeners.
func (c *Config) validateSecurity() error {
	tls, sasl := false, false
	for _, l := range c.Listeners {
		tls = tls || c.UsesTLS(l.Name)
		sasl = sasl || c.UsesSASL(l.Name)
	}
	if tls && (c.SSLCertificateLocation == "" || c.SSLKeyLocation == "") {
		return fmt.Errorf("an SSL or SASL_SSL listener needs --ssl.certificate.location and --ssl.key.location")
	}
	switch c.SSLClientAuth {
	case "none", "requested", "required":
	default:
		return fmt.Errorf("ssl.client.auth must be none, requested or required")
	}
	if sasl && len(c.SASLMechanisms) == 0 {
		return fmt.Errorf("a SASL listener needs at least one mechanism in --sasl.enabled.mechanisms")
	}
	switch c.Authorizer {
	case "", "simple":
	default:
		return fmt.Errorf("authorizer must be empty (off) or simple")
	}
	if _, err := auth.ParseSuperUsers(c.SuperUsers); err != nil {
		return fmt.Errorf("super.users: %w", err)
	}
	if c.SASLMaxReceiveSize <= 0 {
		return fmt.Errorf("sasl.server.max.receive.size must be positive")
	}
	if c.FailedAuthDelay < 0 {
		return fmt.Errorf("connection.failed.authentication.delay.ms must not be negative")
	}
	if c.SecurityFilesPoll <= 0 {
		return fmt.Errorf("security.files.poll.interval.ms must be positive")
	}
	return nil
}

// ParseConnectionOverrides reads max.connections.per.ip.overrides, "host:count,host:count",
// as Apache's parseCsvMap does: the count follows the last colon, so an IPv6 address may
// be a host ("::1:5"; "[::1]:5" also works). A host is a name or an IP address; it is
// resolved when the broker starts.
func ParseConnectionOverrides(v string) (map[string]int32, error) {
	out := map[string]int32{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		i := strings.LastIndexByte(part, ':')
		if i < 0 {
			return nil, fmt.Errorf("%q: want host:count", part)
		}
		host := strings.TrimSpace(part[:i])
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
		if host == "" || strings.ContainsAny(host, " \t/[]") {
			return nil, fmt.Errorf("%q: want host:count with a host name or IP address", part)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(part[i+1:]), 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: the count must be a number from 0 to 2147483647", part)
		}
		if _, dup := out[host]; dup {
			return nil, fmt.Errorf("host %s given twice", host)
		}
		out[host] = int32(n)
	}
	return out, nil
}

func joinConnectionOverrides(m map[string]int32) string {
	hosts := make([]string, 0, len(m))
	for h := range m {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = h + ":" + strconv.Itoa(int(m[h]))
	}
	return strings.Join(parts, ",")
}

// Row is one setting as the help and the README table show it.
type Row struct{ Key, Env, Default, Help string }

// Table lists every setting with its default.
func Table() []Row {
	c := Default()
	var rows []Row
	for _, s := range settings(&c) {
		rows = append(rows, Row{s.key, EnvName(s.key), s.value(&c), s.help})
	}
	return rows
}

// PrintHelp writes the usage with every setting and its default.
func PrintHelp(out io.Writer) {
	fmt.Fprintf(out, "Usage: kaas [--key=value ...]\n\nEvery setting can also come from the environment as KAAS_<KEY> (dots become underscores).\n\n")
	rows := Table()
	for _, r := range rows {
		def := r.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(out, "  --%s (env %s, default %s)\n      %s\n", r.Key, r.Env, def, r.Help)
	}
}

// FromEnv is Parse over os.Args and os.Getenv.
func FromEnv(out io.Writer) (Config, error) { return Parse(os.Args[1:], os.Getenv, out) }

// InterBrokerListenerName is the listener peers are reached on: inter.broker.listener.name,
// else the first listener.
func (c *Config) InterBrokerListenerName() string {
	if c.InterBrokerListener != "" {
		return c.InterBrokerListener
	}
	if len(c.Listeners) == 0 {
		return ""
	}
	return c.Listeners[0].Name
}

// validateInterBroker checks the inter-broker listener and, when it is SASL, this
// broker's credentials.
func (c *Config) validateInterBroker() error {
	name := c.InterBrokerListenerName()
	found := false
	for _, l := range c.Listeners {
		found = found || l.Name == name
	}
	switch {
	case !found:
		return fmt.Errorf("inter.broker.listener.name: %s names no listener", name)
	case len(c.RegistryPeers) > 0 && name != c.Listeners[0].Name:
		return fmt.Errorf("inter.broker.listener.name: %s is not the first listener, and --registry.peers gives each broker's address on the first listener only", name)
	case c.InterBrokerRequestTimeout <= 0:
		return fmt.Errorf("inter.broker.request.timeout.ms must be positive")
	case c.InterBrokerMaxInFlight <= 0:
		return fmt.Errorf("inter.broker.max.in.flight.requests must be positive")
	}
	if !c.UsesSASL(name) {
		return nil
	}
	switch c.InterBrokerSASLMechanism {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("sasl.mechanism.inter.broker.protocol must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	}
	if (c.InterBrokerSASLUsername == "") != (c.InterBrokerSASLPasswordFile == "") {
		return fmt.Errorf("the inter-broker listener %s is SASL: give both --inter.broker.sasl.username and --inter.broker.sasl.password.file, or neither (no forwarding)", name)
	}
	return nil
}

// ConsumerProtocol reports whether the consumer group protocol (KIP-848) is served:
// group.coordinator.rebalance.protocols names consumer.
func (c *Config) ConsumerProtocol() bool {
	return slices.Contains(c.GroupRebalanceProtocols, "consumer")
}

// parseAssignors reads group.consumer.assignors: a non-empty list of the server-side
// assignors this broker has, each once.
func parseAssignors(v string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		switch {
		case a != "uniform" && a != "range":
			return nil, fmt.Errorf("unknown assignor %q: want uniform or range", a)
		case slices.Contains(out, a):
			return nil, fmt.Errorf("assignor %q twice", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// parseMigrationPolicy reads group.consumer.migration.policy, case-insensitively as
// Apache does.
func parseMigrationPolicy(v string) (string, error) {
	p := strings.ToLower(strings.TrimSpace(v))
	switch p {
	case "bidirectional", "upgrade", "downgrade", "disabled":
		return p, nil
	}
	return "", fmt.Errorf("unknown migration policy %q: want bidirectional, upgrade, downgrade or disabled", v)
}

// parseProtocols reads group.coordinator.rebalance.protocols: classic is required (as in
// Apache); consumer is optional. Apache's streams is not served here.
func parseProtocols(v string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.ToLower(strings.TrimSpace(p))
		switch p {
		case "classic", "consumer":
		default:
			return nil, fmt.Errorf("unknown or unserved group protocol %q: want classic and optionally consumer", p)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if !slices.Contains(out, "classic") {
		return nil, fmt.Errorf("group.coordinator.rebalance.protocols must include classic")
	}
	return out, nil
}
