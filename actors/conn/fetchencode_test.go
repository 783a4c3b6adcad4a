package conn

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A Fetch response framed in segments is, joined, the frame kmsg encodes, at every
// version served, with and without records, aborted transactions, nulls and errors; the
// large record batches are the partition's own slices, not copies.
func TestEncodeFetchMatchesKmsg(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for v := int16(4); v <= 18; v++ {
		for n := 0; n < 200; n++ {
			resp := randomFetchResponse(rng, v)
			c := &Call{Key: 1, Version: v, CorrelationID: rng.Int32()}
			want := encodeResponse(c, resp, 64)
			segs := encodeFetch(c, resp)
			if segs == nil {
				t.Fatalf("v%d: not encoded in segments", v)
			}
			if got := bytes.Join(segs, nil); !bytes.Equal(got, want) {
				t.Fatalf("v%d: segments differ from kmsg's frame:\n got %x\nwant %x", v, got, want)
			}
			for _, tp := range resp.Topics {
				for _, p := range tp.Partitions {
					if len(p.RecordBatches) < fetchSplitAt {
						continue
					}
					shared := false
					for _, s := range segs {
						if len(s) > 0 && &s[0] == &p.RecordBatches[0] {
							shared = true
						}
					}
					if !shared {
						t.Fatalf("v%d: %d bytes of batches copied into the frame", v, len(p.RecordBatches))
					}
				}
			}
		}
	}
}

// A response setting a tagged field the segment encoder leaves to kmsg is not split.
func TestEncodeFetchLeavesTagsToKmsg(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, set := range []func(r *kmsg.FetchResponse){
		func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].DivergingEpoch.Epoch = 3 },
		func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].CurrentLeader.LeaderID = 1 },
		func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].SnapshotID.EndOffset = 9 },
		func(r *kmsg.FetchResponse) { r.Brokers = append(r.Brokers, kmsg.FetchResponseBroker{NodeID: 1}) },
		func(r *kmsg.FetchResponse) { r.UnknownTags.Set(9, []byte{1}) },
	} {
		resp := randomFetchResponse(rng, 16)
		resp.Topics = append(resp.Topics, kmsg.NewFetchResponseTopic())
		resp.Topics[0].Partitions = append(resp.Topics[0].Partitions, kmsg.NewFetchResponseTopicPartition())
		set(resp)
		if segs := encodeFetch(&Call{Key: 1, Version: 16}, resp); segs != nil {
			t.Fatalf("split a response with a tagged field set")
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
				rp.RecordBatches = make([]byte, 1+rng.IntN(fetchSplitAt-1))
			default:
				rp.RecordBatches = make([]byte, fetchSplitAt+rng.IntN(3*fetchSplitAt))
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
