package broker_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// A peer that accepts connections but answers nothing (a paused process: its kernel
// still completes the handshake) and holds no lease is left out of Metadata's brokers,
// and none of its keys is named as led by it: clients that drop it from their broker list
// stop sending it requests that would hang. Before, Metadata listed every broker the
// registry's connection probe reached.
func TestMetadataLeavesOutLapsedPeer(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close() // never accepted: connections wait in its backlog
	cfgs := clusterConfigs(t, 2)
	cfgs[0].RegistryPeers[1] = config.Peer{ID: 1, Host: "127.0.0.1", Port: silent.Addr().(*net.TCPAddr).Port}
	a := brokertest.StartWith(t, cfgs[0])
	waitReady(t, a)
	cl := directClient(t, a.Addr())

	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "lapsed", 8, 1
	create.Topics = append(create.Topics, ct)
	create.TimeoutMillis = 10_000
	if _, err := create.RequestWith(context.Background(), cl); err != nil {
		t.Fatal(err)
	}

	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		topic := "lapsed"
		rt.Topic = &topic
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		ok := len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && len(resp.Topics[0].Partitions) == 8
		for _, b := range resp.Brokers {
			if b.NodeID == 1 {
				t.Fatalf("Metadata lists broker 1, whose lease lapsed: %+v", resp.Brokers)
			}
		}
		if ok {
			for _, p := range resp.Topics[0].Partitions {
				if p.Leader == 1 {
					t.Fatalf("partition %d named as led by broker 1, whose lease lapsed", p.Partition)
				}
				if p.Leader != 0 {
					ok = false
				}
			}
		}
		if !ok {
			return fmt.Errorf("Metadata never settled on broker 0 leading every partition: %+v", resp.Topics)
		}
		return nil
	})
}
