package partition_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// twoBrokers starts a static cluster of two brokers on one data dir and waits until
// each routes by a view with both alive; it answers the catalogue's writer first.
func twoBrokers(t *testing.T) (writer, other *broker.Broker) {
	t.Helper()
	var ports []int
	for i := 0; i < 2; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	dir := t.TempDir()
	peers := []config.Peer{{ID: 0, Host: "127.0.0.1", Port: ports[0]}, {ID: 1, Host: "127.0.0.1", Port: ports[1]}}
	var bs []*broker.Broker
	for i, p := range ports {
		c := brokertest.Config(t)
		c.DataDir, c.NodeID = dir, int32(i)
		c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: p}}
		c.Registry, c.RegistryPeers, c.ClusterSize = "static", peers, 2
		c.RegistryProbe = 50 * time.Millisecond
		c.LeaseDuration, c.LeaseRenew = 1200*time.Millisecond, 200*time.Millisecond
		bs = append(bs, brokertest.StartWith(t, c))
	}
	testwait.For(t, 30*time.Second, 10*time.Millisecond, func() error {
		for _, b := range bs {
			if err := b.Ready(); err != nil || !bothAlive(b) {
				return fmt.Errorf("broker not ready with both brokers in its view: %v", err)
			}
		}
		return nil
	})
	c := brokertest.Dial(t, bs[0].Addr())
	md := c.Roundtrip(kmsg.NewPtrMetadataRequest(), 1).(*kmsg.MetadataResponse)
	if md.ControllerID == 1 {
		return bs[1], bs[0]
	}
	return bs[0], bs[1]
}

func bothAlive(b *broker.Broker) bool {
	st := b.Env().Ownership()
	return st != nil && st.Ready && len(st.View.Alive) == 2
}

func createOn(t *testing.T, c *brokertest.Raw, topic string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.SetVersion(5)
	req.TimeoutMillis = 5000
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, 1, 1
	req.Topics = append(req.Topics, ct)
	if r := c.Roundtrip(req, 9).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create %s: %+v", topic, r.Topics[0])
	}
}

// The four data requests of one partition, each answering its error code.
func produceTo(c *brokertest.Raw, topic string, part int32) int16 {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = part, batchOf("v")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return c.Roundtrip(req, 1).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

func fetchFrom(c *brokertest.Raw, topic string, id [16]byte, part int32) int16 {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	if id != ([16]byte{}) {
		req.SetVersion(13)
	}
	req.ReplicaID, req.MaxBytes, req.SessionEpoch = -1, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = part, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return c.Roundtrip(req, 2).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode
}

func listOffsetOf(c *brokertest.Raw, topic string, part int32) int16 {
	req := kmsg.NewPtrListOffsetsRequest()
	req.SetVersion(7)
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = part, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return c.Roundtrip(req, 3).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode
}

func epochEndOf(c *brokertest.Raw, topic string, part int32) int16 {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.SetVersion(4)
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = part, -1, 0
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return c.Roundtrip(req, 4).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode
}

// TestDataRequestsOnTopicNotYetKnownHere: a topic just created through the catalogue's
// writer exists before the other broker's next catalogue read. Asked there at once,
// Produce, Fetch, ListOffsets and OffsetForLeaderEpoch answer a code a client retries
// (NOT_LEADER_OR_FOLLOWER, as while a partition waits for its lock) or serve it, never
// UNKNOWN_TOPIC_OR_PARTITION; a topic, a topic id or a partition that does not exist is
// still UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID).
func TestDataRequestsOnTopicNotYetKnownHere(t *testing.T) {
	writer, other := twoBrokers(t)
	w := brokertest.Dial(t, writer.Addr())
	o := brokertest.Dial(t, other.Addr())
	probes := []struct {
		name string
		ask  func(topic string, part int32) int16
	}{
		{"produce", func(topic string, part int32) int16 { return produceTo(o, topic, part) }},
		{"fetch", func(topic string, part int32) int16 { return fetchFrom(o, topic, [16]byte{}, part) }},
		{"list offsets", func(topic string, part int32) int16 { return listOffsetOf(o, topic, part) }},
		{"offset for leader epoch", func(topic string, part int32) int16 { return epochEndOf(o, topic, part) }},
	}
	for i, p := range probes {
		// A topic of its own each: one answer must not rely on another's re-read.
		topic := fmt.Sprintf("new-%d", i)
		createOn(t, w, topic)
		switch code := p.ask(topic, 0); code {
		case 0, kerr.NotLeaderForPartition.Code:
		default:
			t.Errorf("%s right after %s was created through broker %d: %v, want NOT_LEADER_OR_FOLLOWER or success",
				p.name, topic, writer.Env().Config.NodeID, kerr.ErrorForCode(code))
		}
		if code := p.ask("never-created", 0); code != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("%s of a topic that does not exist: %v", p.name, kerr.ErrorForCode(code))
		}
		if code := p.ask(topic, 5); code != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("%s of a partition the topic does not have: %v", p.name, kerr.ErrorForCode(code))
		}
	}
	if code := fetchFrom(o, "", [16]byte{1, 2, 3}, 0); code != kerr.UnknownTopicID.Code {
		t.Errorf("fetch of a topic id that does not exist: %v", kerr.ErrorForCode(code))
	}
}
