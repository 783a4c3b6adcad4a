package conn

import (
	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/partition"
	"kaas/auth"
	"kaas/cluster"
	"kaas/config"
	"kaas/logs"
	"kaas/metrics"
	"kaas/peer"
	"kaas/registry"
)

// Env is what every connection shares: the broker's identity and the actors that own
// groups and partitions. It is built once at start and only read afterwards.
type Env struct {
	Config    *config.Config
	NodeID    int32
	ClusterID string
	System    *actor.System
	Registry  *registry.Registry
	// Ownership, in a cluster, is the ownership controller's state in force: which
	// groups and partitions this broker serves. Nil: a broker alone serves everything.
	Ownership func() *cluster.State
	Metrics   *metrics.Metrics
	Log       zerolog.Logger
	// Peers, in a cluster, sends requests to other brokers (package peer): a topic
	// change asked of a broker that does not write the catalogue is forwarded to the
	// one that does (forward.go). Nil: a broker alone.
	Peers *peer.Client

	// Groups is the groups manager (actors/group): every group API is asked of it.
	Groups *actor.PID
	// Txns is the transactions manager (actors/txn), the transaction coordinator of this
	// broker (in a cluster, of the ids the cluster routes here); nil in tests without one:
	// a transactional InitProducerId then gets UNSUPPORTED_VERSION.
	Txns *actor.PID
	// Topics is the topics manager (actors/partition): the topic catalogue, and the
	// partitions the published catalogue does not name yet (a cluster's new topics).
	Topics *actor.PID
	// VerifyTxnGroup asks the transaction coordinator whether a group is in a producer's
	// transaction before a TxnOffsetCommit is stored (28_txn_offset_commit.go). Nil: the
	// broker has no transaction coordinator, and TxnOffsetCommit answers
	// COORDINATOR_NOT_AVAILABLE.
	VerifyTxnGroup TxnGroupVerifier
	// Catalog is the topics manager's published catalogue, read without asking it: the
	// data route (route.go) sends Produce, Fetch, ListOffsets and OffsetForLeaderEpoch
	// by it straight to the partition actors. Set with Topics, and loaded
	// (partition.Catalog.Loaded) before the first connection is accepted.
	Catalog *partition.Catalog

	// VerifyTxn asks the transaction coordinator whether a transactional batch's
	// partitions are in its producer's transaction, or adds them (Produce v12;
	// txnproduce.go). Nil: no coordinator, and transactional batches are refused
	// (INVALID_TXN_STATE), as in a cluster this round.
	VerifyTxn TxnVerifier

	// Authorizer decides every request's access (nil: authorization off, everything
	// allowed); Credentials are the SASL users (nil: no SASL listener).
	Authorizer  *auth.Authorizer
	Credentials *auth.Credentials
	// AuthFailureLog rate-limits sasl_authentication_failed across the broker's
	// connections, so a client guessing passwords does not flood the log (every failure
	// is still counted); nil logs each one.
	AuthFailureLog *logs.Limiter

	// RequestBytes bounds the bytes held by request frames being read, across the broker
	// (queued.max.request.bytes); ResponseBytes counts the bytes of responses built and
	// not yet written (queued.max.response.bytes). Nil: no bound.
	RequestBytes  *Budget
	ResponseBytes *Budget
}
