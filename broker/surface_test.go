package broker_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// A transactional producer is refused with UNSUPPORTED_VERSION (transactions are not
// built yet); the broker says so in its log once per connection, with the client and
// transactional ids, however often the client retries.
func TestTransactionalProducerIsLoggedOnce(t *testing.T) {
	b, logs, err := brokertest.StartLogged(t, brokertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	c := brokertest.Dial(t, b.Addr())
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(4)
	req.ProducerID, req.ProducerEpoch = -1, -1
	req.TransactionalID = kmsg.StringPtr("orders-txn")
	for i := int32(0); i < 3; i++ {
		if r := c.Roundtrip(req, i).(*kmsg.InitProducerIDResponse); r.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("transactional InitProducerId: %v", kerr.ErrorForCode(r.ErrorCode))
		}
	}
	// The responses came after the log line of the first request: no wait needed.
	out := logs.String()
	if n := strings.Count(out, "transactions_not_supported_yet"); n != 1 {
		t.Fatalf("%d log lines about transactions, want 1:\n%s", n, out)
	}
	for _, want := range []string{`"transactional_id":"orders-txn"`, `"client_id":`} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %s:\n%s", want, out)
		}
	}
}
