package broker

import "kaas/actors/txn"

// ClusterTxnSides is clusterTxnSides, for the tests of package broker_test.
func (b *Broker) ClusterTxnSides() txn.Sides { return b.clusterTxnSides() }
