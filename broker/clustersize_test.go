package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
)

// A broker started with another cluster size than the data directory's cluster (a fourth
// broker with a four-peer list beside three) refuses to start, with an error naming both
// sizes, before it takes a lease its peers would see. Before, it joined: two brokers
// released partitions to it while their Metadata still named themselves.
func TestClusterOfAnotherSizeRefused(t *testing.T) {
	three := clusterConfigs(t, 3)
	b0 := brokertest.StartWith(t, three[0])
	waitReady(t, b0)

	four := clusterConfigs(t, 4)[3]
	four.DataDir = three[0].DataDir
	four.RegistryPeers = append(append([]config.Peer(nil), three[0].RegistryPeers...), four.RegistryPeers[3])
	_, _, err := brokertest.StartLogged(t, four)
	if err == nil {
		t.Fatal("a broker of a cluster of 4 started on the data dir of a cluster of 3")
	}
	if !errors.Is(err, broker.ErrClusterSize) || !strings.Contains(err.Error(), "cluster.size 4") || !strings.Contains(err.Error(), "3") {
		t.Fatalf("error %q does not say the sizes differ", err)
	}
	if _, err := os.Stat(filepath.Join(four.DataDir, "__cluster", "nodes", "broker-3.lock")); !os.IsNotExist(err) {
		t.Fatalf("the refused broker left a lock file its peers would watch: %v", err)
	}
	// Broker 1 of the same three still starts.
	b1 := brokertest.StartWith(t, three[1])
	waitReady(t, b0, b1)
}
