package conn

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchSplitAt is the size from which a partition's record batches leave a Fetch
// response's frame as a segment of their own instead of being copied into it.
const fetchSplitAt = 4 << 10

// encodeFetch frames a Fetch response as encodeResponse does, byte for byte, but in
// segments: every partition's record batches of fetchSplitAt bytes or more are not
// copied into the frame, they follow the bytes before them as a segment of their own
// (the slice the partition's read made), and the writer sends the segments in one
// writev. A fetch of megabytes was copied into a frame grown from a small guess several
// times over. nil when resp sets a field this encoder leaves to kmsg: the tagged fields
// kaas does not set (diverging epoch, current leader, snapshot id, node endpoints,
// unknown tags); encodeResponse then frames it.
func encodeFetch(c *Call, r *kmsg.FetchResponse) [][]byte {
	if !fetchSplittable(r) {
		return nil
	}
	v := r.Version
	flex := v >= 12
	type cut struct {
		at   int // where in buf the batches go
		recs []byte
	}
	var cuts []cut
	size := 64
	for i := range r.Topics {
		size += 32 + len(r.Topics[i].Topic)
		for j := range r.Topics[i].Partitions {
			p := &r.Topics[i].Partitions[j]
			size += 64 + 16*len(p.AbortedTransactions)
			if len(p.RecordBatches) < fetchSplitAt {
				size += len(p.RecordBatches)
			}
		}
	}
	buf := make([]byte, 4, size)
	buf = kbin.AppendInt32(buf, c.CorrelationID)
	if flex {
		buf = append(buf, 0) // response header v1: no tagged fields
	}
	if v >= 1 {
		buf = kbin.AppendInt32(buf, r.ThrottleMillis)
	}
	if v >= 7 {
		buf = kbin.AppendInt16(buf, r.ErrorCode)
		buf = kbin.AppendInt32(buf, r.SessionID)
	}
	buf = appendArrayLen(buf, len(r.Topics), flex)
	for i := range r.Topics {
		t := &r.Topics[i]
		if v <= 12 {
			if flex {
				buf = kbin.AppendCompactString(buf, t.Topic)
			} else {
				buf = kbin.AppendString(buf, t.Topic)
			}
		} else {
			buf = kbin.AppendUuid(buf, t.TopicID)
		}
		buf = appendArrayLen(buf, len(t.Partitions), flex)
		for j := range t.Partitions {
			p := &t.Partitions[j]
			buf = kbin.AppendInt32(buf, p.Partition)
			buf = kbin.AppendInt16(buf, p.ErrorCode)
			buf = kbin.AppendInt64(buf, p.HighWatermark)
			if v >= 4 {
				buf = kbin.AppendInt64(buf, p.LastStableOffset)
			}
			if v >= 5 {
				buf = kbin.AppendInt64(buf, p.LogStartOffset)
			}
			if v >= 4 {
				a := p.AbortedTransactions
				if flex {
					buf = kbin.AppendCompactNullableArrayLen(buf, len(a), a == nil)
				} else {
					buf = kbin.AppendNullableArrayLen(buf, len(a), a == nil)
				}
				for k := range a {
					buf = kbin.AppendInt64(buf, a[k].ProducerID)
					buf = kbin.AppendInt64(buf, a[k].FirstOffset)
					if flex {
						buf = append(buf, 0) // no tagged fields
					}
				}
			}
			if v >= 11 {
				buf = kbin.AppendInt32(buf, p.PreferredReadReplica)
			}
			recs := p.RecordBatches
			switch {
			case recs == nil && flex:
				buf = append(buf, 0)
			case recs == nil:
				buf = kbin.AppendInt32(buf, -1)
			case flex:
				buf = kbin.AppendUvarint(buf, 1+uint32(len(recs)))
			default:
				buf = kbin.AppendInt32(buf, int32(len(recs)))
			}
			if len(recs) >= fetchSplitAt {
				cuts = append(cuts, cut{at: len(buf), recs: recs})
			} else {
				buf = append(buf, recs...)
			}
			if flex {
				buf = append(buf, 0) // no tagged fields (fetchSplittable)
			}
		}
		if flex {
			buf = append(buf, 0)
		}
	}
	if flex {
		buf = append(buf, 0)
	}
	segs := make([][]byte, 0, 2*len(cuts)+1)
	n := len(buf) - 4
	from := 0
	for _, c := range cuts {
		segs = append(segs, buf[from:c.at:c.at], c.recs)
		n += len(c.recs)
		from = c.at
	}
	if from < len(buf) || len(segs) == 0 {
		segs = append(segs, buf[from:])
	}
	buf[0], buf[1], buf[2], buf[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return segs
}

func appendArrayLen(dst []byte, n int, flex bool) []byte {
	if flex {
		return kbin.AppendCompactArrayLen(dst, n)
	}
	return kbin.AppendArrayLen(dst, n)
}

// fetchSplittable says whether encodeFetch encodes r: none of the tagged fields it
// leaves to kmsg is set.
func fetchSplittable(r *kmsg.FetchResponse) bool {
	if r.Version < 4 || r.Version > 18 || len(r.Brokers) > 0 || r.UnknownTags.Len() > 0 {
		return false
	}
	for i := range r.Topics {
		t := &r.Topics[i]
		if t.UnknownTags.Len() > 0 {
			return false
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if p.UnknownTags.Len() > 0 ||
				p.DivergingEpoch.Epoch != -1 || p.DivergingEpoch.EndOffset != -1 || p.DivergingEpoch.UnknownTags.Len() > 0 ||
				p.CurrentLeader.LeaderID != -1 || p.CurrentLeader.LeaderEpoch != -1 || p.CurrentLeader.UnknownTags.Len() > 0 ||
				p.SnapshotID.EndOffset != -1 || p.SnapshotID.Epoch != -1 || p.SnapshotID.UnknownTags.Len() > 0 {
				return false
			}
			for k := range p.AbortedTransactions {
				if p.AbortedTransactions[k].UnknownTags.Len() > 0 {
					return false
				}
			}
		}
	}
	return true
}
