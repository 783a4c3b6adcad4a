package broker_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// A broker alone coordinates transactions: a transactional producer gets its producer id
// (the refusal of a broker without a coordinator is tested in actors/conn), and nothing
// is logged about transactions being unsupported.
func TestTransactionalProducerIsServedByABrokerAlone(t *testing.T) {
	b, logs, err := brokertest.StartLogged(t, brokertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	c := brokertest.Dial(t, b.Addr())
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(4)
	req.ProducerID, req.ProducerEpoch = -1, -1
	req.TransactionalID = kmsg.StringPtr("orders-txn")
	req.TransactionTimeoutMillis = 60000
	for i := int32(0); i < 3; i++ {
		r := c.Roundtrip(req, i).(*kmsg.InitProducerIDResponse)
		if r.ErrorCode != 0 || r.ProducerEpoch != int16(i) {
			t.Fatalf("transactional InitProducerId %d: %v epoch %d", i, kerr.ErrorForCode(r.ErrorCode), r.ProducerEpoch)
		}
	}
	if strings.Contains(logs.String(), "transactions_not_supported_yet") {
		t.Fatalf("a broker alone logged transactions as unsupported:\n%s", logs.String())
	}
}
