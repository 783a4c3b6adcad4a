package group_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/offsets"
	"kaas/config"
	"kaas/internal/testwait"
)

// A group whose file is corrupt answers COORDINATOR_NOT_AVAILABLE; once the operator
// repairs the file, the group reads it again (at most every 5 s) and serves it, with no
// restart (docs/offsets.md, "Recovering a corrupt offsets file").
//
// The file is cut short before the broker starts: a broker alone takes a group whose
// file was not there at its start, and that it has not served since, as new.
func TestCorruptGroupFileServedOnceRepaired(t *testing.T) {
	const g = "repaired"
	var path string
	good := `{"version":1,"group":"repaired","meta":{"protocol_type":"","generation":0,"empty_since":0},` +
		`"offsets":[{"topic":"t","partition":0,"offset":42,"leader_epoch":3,"metadata":"m","commit_time":1,"expire_time":0}]}` + "\n"
	w := startWire(t, func(c *config.Config) {
		dir := offsets.Dir(c.DataDir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(dir, offsets.FileName(g))
		if err := os.WriteFile(path, []byte(good[:len(good)/2]), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	w.createTopics(1, "t")

	fetch := func() *kmsg.OffsetFetchResponse {
		return w.do(fetchReq(1, g, map[string][]int32{"t": {0}})).(*kmsg.OffsetFetchResponse)
	}
	partition := func(r *kmsg.OffsetFetchResponse) (int64, int16) {
		if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch answered %+v", r)
		}
		p := r.Topics[0].Partitions[0]
		return p.Offset, p.ErrorCode
	}
	if _, code := partition(fetch()); code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("fetch of a corrupt group: %s, want COORDINATOR_NOT_AVAILABLE", codeName(code))
	}
	c := w.do(commitReq(g, 2, "", -1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)
	wantCode(t, "commit to a corrupt group", c.Topics[0].Partitions[0].ErrorCode, kerr.CoordinatorNotAvailable.Code)

	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, 100*time.Millisecond, func() error {
		off, code := partition(fetch())
		switch code {
		case 0:
			if off != 42 {
				t.Fatalf("repaired group fetched offset %d, want 42", off)
			}
			return nil
		case kerr.CoordinatorNotAvailable.Code:
			return errors.New("the repaired file was not read again")
		}
		t.Fatalf("fetch while repairing: %s", codeName(code))
		return nil
	})
	c = w.do(commitReq(g, 2, "", -1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)
	wantCode(t, "commit after the repair", c.Topics[0].Partitions[0].ErrorCode, 0)
}
