package conn

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A Produce never answers a code its version does not know (KIP-1050's classes are the
// client's: the broker's part is the right code per version).
func TestProduceTxnCodeByVersion(t *testing.T) {
	for _, c := range []struct {
		code    int16
		version int16
		want    int16
	}{
		{kerr.InvalidTxnState.Code, 10, kerr.InvalidTxnState.Code},
		{kerr.InvalidTxnState.Code, 11, kerr.TransactionAbortable.Code},
		{kerr.TransactionAbortable.Code, 3, kerr.InvalidTxnState.Code},
		{kerr.TransactionAbortable.Code, 12, kerr.TransactionAbortable.Code},
		{kerr.ProducerFenced.Code, 12, kerr.InvalidProducerEpoch.Code},
		{kerr.ConcurrentTransactions.Code, 12, kerr.NotEnoughReplicas.Code},
		{kerr.NotCoordinator.Code, 9, kerr.NotEnoughReplicas.Code},
		{kerr.CoordinatorLoadInProgress.Code, 9, kerr.NotEnoughReplicas.Code},
		{kerr.CoordinatorNotAvailable.Code, 9, kerr.NotEnoughReplicas.Code},
		{kerr.InvalidProducerIDMapping.Code, 9, kerr.InvalidProducerIDMapping.Code},
		{kerr.InvalidProducerEpoch.Code, 9, kerr.InvalidProducerEpoch.Code},
	} {
		if got := produceTxnCode(c.code, c.version); got != c.want {
			t.Errorf("%v at v%d: %v, want %v", kerr.ErrorForCode(c.code), c.version, kerr.ErrorForCode(got), kerr.ErrorForCode(c.want))
		}
	}
}
