package conn

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lockedBuffer is a log sink the connection actors write while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTransactionsWithoutCoordinator: with no transaction coordinator (Env.Txns nil: a
// broker that starts none) a transactional producer is refused with UNSUPPORTED_VERSION,
// logged once per connection with the client and transactional ids however often the
// client retries; the other transaction APIs answer COORDINATOR_NOT_AVAILABLE.
func TestTransactionsWithoutCoordinator(t *testing.T) {
	var logs lockedBuffer
	addr, _ := serveWith(t, func(e *Env) { e.Log = zerolog.New(&logs) })
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(1) // roundtrip reads non-flexible response headers only
	req.ProducerID, req.ProducerEpoch = -1, -1
	req.TransactionalID = kmsg.StringPtr("orders-txn")
	req.TransactionTimeoutMillis = 60000
	for range 3 {
		r, err := roundtrip(t, nc, req)
		if err != nil {
			t.Fatal(err)
		}
		if code := r.(*kmsg.InitProducerIDResponse).ErrorCode; code != kerr.UnsupportedVersion.Code {
			t.Fatalf("transactional InitProducerId: %v", kerr.ErrorForCode(code))
		}
	}
	// The responses came after the log line of the first request: no wait needed.
	out := logs.String()
	if n := strings.Count(out, "transactions_not_supported_yet"); n != 1 {
		t.Fatalf("%d log lines about transactions, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, `"transactional_id":"orders-txn"`) {
		t.Fatalf("log lacks the transactional id:\n%s", out)
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.SetVersion(1)
	end.TransactionalID = "orders-txn"
	r, err := roundtrip(t, nc, end)
	if err != nil {
		t.Fatal(err)
	}
	if code := r.(*kmsg.EndTxnResponse).ErrorCode; code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("EndTxn: %v", kerr.ErrorForCode(code))
	}
}
