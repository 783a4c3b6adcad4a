package txn

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// Marker is one partition's end of a producer's transaction: the fields of
// partition.WriteTxnMarker (contract 1), which the topics manager routes to the
// partition's actor; the control batch is appended and fsynced before the answer.
type Marker struct {
	Topic            string
	Partition        int32
	ProducerID       int64
	ProducerEpoch    int16
	Commit           bool
	CoordinatorEpoch int32
}

// GroupMarker ends a producer's pending transactional offsets in a group: the fields of
// group.TxnOffsetMarker (contract 3), applied (Commit) or dropped, durable before the
// answer.
type GroupMarker struct {
	Group         string
	ProducerID    int64
	ProducerEpoch int16
	Commit        bool
}

// Sides is how an id's actor ends its transaction on the partitions and groups. Each
// call sends its message with reply, which the receiver resolves once (its answer, with
// an error code, or nothing when the receiver is gone: the coordinator then retries).
// Both are idempotent on the receiving side, so a marker sent again after a restart or
// a retry does no harm.
type Sides struct {
	// WriteMarker sends a partition.WriteTxnMarker for m with reply.
	WriteMarker func(ctx actor.Context, m Marker, reply actor.Promise)
	// EndOffsets sends a group.TxnOffsetMarker for m with reply.
	EndOffsets func(ctx actor.Context, m GroupMarker, reply actor.Promise)
	// Code reads the error code of an answer (a *partition.TxnMarkerWritten, a
	// *group.TxnOffsetMarked); false when v is not one. Nil: the answers are int16.
	Code func(v any) (int16, bool)
}

func (s *Sides) code(v any) int16 {
	if s.Code != nil {
		if c, ok := s.Code(v); ok {
			return c
		}
	}
	if c, ok := v.(int16); ok {
		return c
	}
	return kerr.RequestTimedOut.Code // no answer (the receiver stopped, the wait ran out)
}

// markerOutcome is what a side effect's code means for the transaction: done, retried
// later, or given up (Apache's TransactionMarkerRequestCompletionHandler).
type markerOutcome int

const (
	markerDone markerOutcome = iota
	markerRetry
	markerDropped // the partition will not take it and never will: logged, not retried
)

func outcomeOf(code int16) markerOutcome {
	switch code {
	case 0:
		return markerDone
	case kerr.UnknownTopicOrPartition.Code:
		// On one broker the catalogue is authoritative: a deleted topic has no data
		// left to end (Apache drops a partition missing from its metadata likewise).
		return markerDropped
	case kerr.InvalidProducerEpoch.Code, kerr.TransactionCoordinatorFenced.Code, kerr.UnsupportedVersion.Code:
		return markerDropped
	}
	return markerRetry
}
