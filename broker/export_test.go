package broker

import (
	"kaas/actors/txn"
	"kaas/config"
)

// ClusterTxnSides is clusterTxnSides, for the tests of package broker_test.
func (b *Broker) ClusterTxnSides() txn.Sides { return b.clusterTxnSides() }

// Config is the broker's config, for the tests that start it again.
func (b *Broker) Config() config.Config { return b.cfg }
