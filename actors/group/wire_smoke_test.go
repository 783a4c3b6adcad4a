package group_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestWireSmoke(t *testing.T) {
	w := startWire(t, ptProfile)
	m := w.stable1("g")
	d := describe(w, 5, "g")
	if d.Groups[0].State != "Stable" || len(d.Groups[0].Members) != 1 || d.Groups[0].Members[0].MemberID != m {
		t.Fatalf("describe: %+v", d.Groups[0])
	}
	hb := w.do(hbReq("g", m, 1)).(*kmsg.HeartbeatResponse)
	wantCode(t, "heartbeat", hb.ErrorCode, 0)
	_ = time.Second
}
