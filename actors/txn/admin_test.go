package txn

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

func (c *coord) adminAbort(pid int64, epoch int16, tps map[string][]int32) *AdminAborted {
	return c.ask(func(p actor.Promise) any {
		return &AdminAbort{ProducerID: pid, ProducerEpoch: epoch, Partitions: tps, Reply: p}
	}).(*AdminAborted)
}

func (c *coord) check(topic string, p int32, pid int64, epoch int16) bool {
	v, _ := c.ask(func(r actor.Promise) any {
		return &CheckTxn{Topic: topic, Partition: p, ProducerID: pid, ProducerEpoch: epoch, Reply: r}
	}).(*TxnChecked)
	return v != nil && v.Held
}

// TestAdminAbortThroughCoordinator: an operator's abort of a partition of an Ongoing
// transaction aborts the whole transaction through its coordinator (every partition's
// marker at the bumped epoch, the producer fenced, CompleteAbort), and writes the
// partitions it does not hold as Apache would; a producer the coordinator does not know
// gets its markers written as they are.
func TestAdminAbortThroughCoordinator(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return ok16() })
	defer c.stop()
	r := c.init("tx", 60000)
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0, 1}})
	if !c.check("a", 1, r.ProducerID, 0) || c.check("a", 2, r.ProducerID, 0) || c.check("a", 0, r.ProducerID+1, 0) {
		t.Fatal("CheckTxn: want held for a-1 of the Ongoing transaction only")
	}
	got := c.adminAbort(r.ProducerID, 0, map[string][]int32{"a": {0}, "b": {7}})
	if got.TransactionalID != "tx" || got.Codes["a"][0] != 0 || got.Codes["b"][7] != 0 || len(got.Codes["a"]) != 1 {
		t.Fatalf("admin abort answered %+v", got)
	}
	seen := map[string]Marker{}
	for range 3 {
		s := c.nextSent()
		seen[s.marker.Topic+"-"+string(rune('0'+s.marker.Partition))] = *s.marker
	}
	for _, k := range []string{"a-0", "a-1"} {
		if m, ok := seen[k]; !ok || m.Commit || m.ProducerEpoch != 1 {
			t.Fatalf("coordinator's marker for %s: %+v (all: %+v), want an abort at the bumped epoch", k, m, seen)
		}
	}
	if m, ok := seen["b-7"]; !ok || m.Commit || m.ProducerEpoch != 0 {
		t.Fatalf("operator's marker for b-7: %+v, want an abort at its epoch", m)
	}
	if d := c.describe("tx"); d.State != CompleteAbort || d.Epoch != 1 {
		t.Fatalf("after the admin abort: %+v", d)
	}
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("the aborted producer's commit: %+v", e)
	}
	if c.check("a", 0, r.ProducerID, 0) {
		t.Fatal("CheckTxn held after the abort completed")
	}
	if v := testutil.ToFloat64(c.met.Aborts.WithLabelValues(abortAdmin)); v != 1 {
		t.Fatalf("admin aborts counted %v", v)
	}
	if v := testutil.ToFloat64(c.met.Markers.WithLabelValues("written")); v != 2 {
		t.Fatalf("coordinator markers written counted %v, want 2", v)
	}

	got = c.adminAbort(99999, 3, map[string][]int32{"c": {1}})
	if s := c.nextSent(); got.TransactionalID != "" || got.Codes["c"][1] != 0 || s.marker.ProducerID != 99999 || s.marker.ProducerEpoch != 3 {
		t.Fatalf("unknown producer's abort: %+v, marker %+v", got, s.marker)
	}
}

// TestAdminAbortRefusedWhileCommitting: the partitions of a transaction whose commit is
// decided are not aborted (CONCURRENT_TRANSACTIONS), and the client abort is counted.
func TestAdminAbortRefusedWhileCommitting(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(m Marker) *int16 {
		if m.Commit {
			return nil // never answered: the commit stays PrepareCommit
		}
		return ok16()
	})
	defer c.stop()
	r := c.init("tx", 60000)
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}})
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
		t.Fatalf("commit: %+v", e)
	}
	c.nextSent()
	got := c.adminAbort(r.ProducerID, 0, map[string][]int32{"a": {0}})
	if got.Codes["a"][0] != kerr.ConcurrentTransactions.Code {
		t.Fatalf("admin abort of a committing transaction: %+v", got)
	}
	r2 := c.init("tx2", 60000)
	c.add("tx2", r2.ProducerID, 0, map[string][]int32{"a": {1}})
	c.end("tx2", r2.ProducerID, 0, false, false)
	if v := testutil.ToFloat64(c.met.Aborts.WithLabelValues(abortClient)); v != 1 {
		t.Fatalf("client aborts counted %v", v)
	}
}
