package partition

import (
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Batch is a produced batch that passed validateProduced (CRC, the one batch rule,
// max.message.bytes, every record readable, a compressed one decompressed to check
// it), done by whoever sends it to the partition: a connection, in its own turn. The
// partition actor appends it checking only what needs its state (idempotence, the
// fence), so a large or compressed batch never holds the partition's other producers
// and readers.
type Batch struct {
	records []byte
	h       header
	// appendTime is the broker's time the batch was stamped with on a LogAppendTime
	// topic (timestamps.go), -1 on a CreateTime one.
	appendTime int64
}

// ValidateBatch validates records for the partition r routes to, by its topic's
// max.message.bytes. A refused batch gets its answer (Apache's code and message),
// counted in kaas_log_rejected_batches_total and logged at most once a second
// broker-wide; it never reaches the partition.
func (r Route) ValidateBatch(records []byte) (*Batch, *Produced) {
	b, perr := validateBatch(records, r.maxMessageBytes)
	if perr == nil && r.compact {
		perr = requireKeys(&b.h, records, r.Topic, r.partition)
	}
	if perr == nil {
		perr = recompress(b, r.codec-1, r.maxMessageBytes) // recompress.go
	}
	if perr == nil {
		perr = r.timestamps.apply(b, time.Now().UnixMilli())
	}
	if perr != nil {
		r.met.rejectedBatch(kerr.ErrorForCode(perr.code).Error())
		logRejected(r.log.With().Str("topic", r.Topic).Int32("partition", r.partition).Logger(), perr, len(records))
		return nil, &Produced{ErrorCode: perr.code, ErrorMessage: perr.msg, BaseOffset: -1, LogStartOffset: -1}
	}
	return b, nil
}

func validateBatch(records []byte, maxBytes int32) (*Batch, *produceError) {
	h, perr := validateProduced(records, maxBytes)
	if perr != nil {
		return nil, perr
	}
	return &Batch{records: records, h: h, appendTime: -1}, nil
}

// logRejected logs a batch refused by validateProduced. The reason is one of ours,
// never client text.
func logRejected(log zerolog.Logger, perr *produceError, size int) {
	rejectedLog.Event(log.Warn()).Int16("error_code", perr.code).Str("reason", perr.msg).
		Int("batch_bytes", size).Msg("partition_produce_rejected")
}

// Transactional says whether the batch belongs to a transaction (attributes bit 4).
func (b *Batch) Transactional() bool { return b.h.Attributes&attrTransactional != 0 }

// Producer is the batch's producer id and epoch.
func (b *Batch) Producer() (int64, int16) { return b.h.ProducerID, b.h.ProducerEpoch }
