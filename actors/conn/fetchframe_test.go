package conn

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A Fetch response's frame is kmsg's, byte for byte, at every version served, with and
// without records, aborted transactions, nulls, errors and tagged fields; it never
// outgrows the bound it is sized by up front (kmsg's append never regrows it), and a
// frame bound by more than 8 KiB lies in a pooled buffer.
func TestFetchFrameFitsItsBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tags := []func(r *kmsg.FetchResponse){
		func(r *kmsg.FetchResponse) {},
		func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].DivergingEpoch.Epoch = 3 },
		func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].CurrentLeader.LeaderID = 1 },
		func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].SnapshotID.EndOffset = 9 },
		func(r *kmsg.FetchResponse) {
			rack := "rack-one"
			r.Brokers = append(r.Brokers, kmsg.FetchResponseBroker{NodeID: 1, Host: "höst.example", Port: 9092, Rack: &rack})
		},
		func(r *kmsg.FetchResponse) { r.UnknownTags.Set(9, []byte("unknown")) },
		func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].UnknownTags.Set(7, make([]byte, 300)) },
	}
	for v := int16(4); v <= 18; v++ {
		for n := 0; n < 200; n++ {
			resp := randomFetchResponse(rng, v)
			resp.Topics = append(resp.Topics, kmsg.NewFetchResponseTopic())
			resp.Topics[len(resp.Topics)-1].Partitions = append(resp.Topics[len(resp.Topics)-1].Partitions, kmsg.NewFetchResponseTopicPartition())
			resp.Topics[0], resp.Topics[len(resp.Topics)-1] = resp.Topics[len(resp.Topics)-1], resp.Topics[0]
			if v >= 12 {
				tags[rng.IntN(len(tags))](resp)
			}
			c := &Call{Key: 1, Version: v, CorrelationID: rng.Int32()}
			want := encodeResponse(c, resp, 64)
			frame, pool := encodeFetchResponse(c, resp)
			if !bytes.Equal(frame, want) {
				t.Fatalf("v%d: frame differs from kmsg's:\n got %x\nwant %x", v, frame, want)
			}
			bound := fetchFrameBound(resp)
			if int64(len(frame)) > bound {
				t.Fatalf("v%d: frame of %d bytes over its bound %d", v, len(frame), bound)
			}
			if (pool != nil) != (bound > 8<<10) {
				t.Fatalf("v%d: frame bound by %d bytes pooled %v", v, bound, pool != nil)
			}
			pool.Release()
		}
	}
}

func randomFetchResponse(rng *rand.Rand, v int16) *kmsg.FetchResponse {
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(v)
	resp.ThrottleMillis = rng.Int32N(100)
	resp.ErrorCode = int16(rng.IntN(3))
	resp.SessionID = rng.Int32()
	for range rng.IntN(4) {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = string(rune('a'+rng.IntN(26))) + "tópic"
		for i := range rt.TopicID {
			rt.TopicID[i] = byte(rng.IntN(256))
		}
		for range rng.IntN(5) {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = rng.Int32N(64)
			rp.ErrorCode = int16(rng.IntN(2))
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = rng.Int64(), rng.Int64(), rng.Int64()
			rp.PreferredReadReplica = -1
			switch rng.IntN(3) {
			case 0: // null
			case 1:
				rp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
			default:
				for range 1 + rng.IntN(3) {
					at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
					at.ProducerID, at.FirstOffset = rng.Int64(), rng.Int64()
					rp.AbortedTransactions = append(rp.AbortedTransactions, at)
				}
			}
			switch rng.IntN(4) {
			case 0: // null
			case 1:
				rp.RecordBatches = []byte{}
			case 2:
				rp.RecordBatches = make([]byte, 1+rng.IntN(4<<10))
			default:
				rp.RecordBatches = make([]byte, 4<<10+rng.IntN(20<<10))
			}
			for i := range rp.RecordBatches {
				rp.RecordBatches[i] = byte(rng.IntN(256))
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
