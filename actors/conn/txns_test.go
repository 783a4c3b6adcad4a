package conn

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestTxnCodesByVersion: a code is sent only to versions that know it (§1.7).
func TestTxnCodesByVersion(t *testing.T) {
	fenced, abortable := kerr.ProducerFenced.Code, kerr.TransactionAbortable.Code
	for _, c := range []struct {
		api                  string
		fencedSince, abSince int16
	}{
		{"InitProducerId", 4, 5}, {"AddPartitionsToTxn", 2, 5}, {"AddOffsetsToTxn", 2, 4}, {"EndTxn", 2, 4},
	} {
		for v := int16(0); v <= 5; v++ {
			wantF, wantA := fenced, abortable
			if v < c.fencedSince {
				wantF = kerr.InvalidProducerEpoch.Code
			}
			if v < c.abSince {
				wantA = kerr.InvalidTxnState.Code
			}
			if got := txnCodeFor(fenced, v, c.fencedSince, c.abSince); got != wantF {
				t.Errorf("%s v%d PRODUCER_FENCED → %d, want %d", c.api, v, got, wantF)
			}
			if got := txnCodeFor(abortable, v, c.fencedSince, c.abSince); got != wantA {
				t.Errorf("%s v%d TRANSACTION_ABORTABLE → %d, want %d", c.api, v, got, wantA)
			}
			if got := txnCodeFor(kerr.ConcurrentTransactions.Code, v, c.fencedSince, c.abSince); got != kerr.ConcurrentTransactions.Code {
				t.Errorf("%s v%d: CONCURRENT_TRANSACTIONS changed to %d", c.api, v, got)
			}
		}
	}
}
