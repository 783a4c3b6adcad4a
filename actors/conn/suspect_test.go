package conn

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/cluster"
	"kaas/config"
	"kaas/registry"
)

// A peer whose held connection just ended (killed, or cut by its paused process's
// watchdog) is suspect: Metadata leaves it out of the brokers, so a client that asks at
// the instant its own connections to it ended does not go on picking it for "any
// broker" requests, and FindCoordinator answers COORDINATOR_NOT_AVAILABLE (retried)
// instead of naming it. Before, both named the peer until the view dropped it.
func TestSuspectPeerNotHandedOut(t *testing.T) {
	cfg := config.Default()
	reg := registry.New(0, 2)
	reg.Set([]registry.Broker{
		{ID: 0, Alive: true, Endpoints: map[string]registry.Endpoint{"PLAINTEXT": {Host: "127.0.0.1", Port: 9092}}},
		{ID: 1, Alive: true, Endpoints: map[string]registry.Endpoint{"PLAINTEXT": {Host: "127.0.0.2", Port: 9092}}},
	})
	reg.MarkSynced()
	st := &cluster.State{View: reg.Snapshot(), Ready: true}
	c := &Call{Listener: "PLAINTEXT", Env: &Env{Config: &cfg, NodeID: 0, Registry: reg,
		Ownership: func() *cluster.State { return st }}}
	key := ""
	for i := 0; key == ""; i++ {
		if id, _ := st.Group(fmt.Sprint("g", i)); id == 1 {
			key = fmt.Sprint("g", i)
		}
	}
	brokers := func() []int32 {
		resp := kmsg.NewPtrMetadataResponse()
		fillBrokers(c, resp)
		var ids []int32
		for _, b := range resp.Brokers {
			ids = append(ids, b.NodeID)
		}
		return ids
	}
	if got := fmt.Sprint(brokers()); got != "[0 1]" {
		t.Fatalf("brokers %s, want [0 1]", got)
	}
	if node, _, _, code := findCoordinator(c, 0, key); node != 1 || code != 0 {
		t.Fatalf("coordinator %d code %d, want 1", node, code)
	}
	reg.SetSuspect(1, true)
	if got := fmt.Sprint(brokers()); got != "[0]" {
		t.Errorf("brokers with peer 1 suspect %s, want [0]", got)
	}
	if node, _, _, code := findCoordinator(c, 0, key); code != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("coordinator on a suspect peer: node %d code %d, want COORDINATOR_NOT_AVAILABLE", node, code)
	}
	reg.SetSuspect(1, false)
	if got := fmt.Sprint(brokers()); got != "[0 1]" {
		t.Errorf("brokers after the peer answered again %s, want [0 1]", got)
	}
}
