package partition

import (
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestRouteValidateBatchRefuses: a connection refuses a bad batch with Apache's code
// before it reaches the partition, by its topic's max.message.bytes.
func TestRouteValidateBatchRefuses(t *testing.T) {
	met := NewMetrics(nil)
	r := Route{Topic: "t", maxMessageBytes: 100, met: met, log: zerolog.Nop()}
	b := testBatch(-1, -1, -1, 10, 0, make([]byte, 50))
	if batch, refused := r.ValidateBatch(b); batch != nil || refused.ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("batch over max.message.bytes: %v %+v", batch, refused)
	}
	b = testBatch(-1, -1, -1, 1, 0, []byte("v"))
	b[len(b)-1] ^= 1
	if batch, refused := r.ValidateBatch(b); batch != nil || refused.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("batch with a bad CRC: %v %+v", batch, refused)
	}
	b[len(b)-1] ^= 1
	if batch, refused := r.ValidateBatch(b); batch == nil || refused != nil || batch.h.RecordCount != 1 {
		t.Fatalf("good batch: %v %+v", batch, refused)
	}
}
