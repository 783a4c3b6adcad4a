package partition

import (
	"testing"
	"time"
)

// segment.ms and segment.jitter.ms as LogSegment.shouldRoll judges them: an empty
// segment never rolls; the batch's max timestamp against the first batch's, less the
// segment's jitter (drawn below min(jitter, segment.ms), the same for the segment's
// life); the broker's clock since the segment became active when the first batch has no
// timestamp; not set, never.
func TestTimeRollDue(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	seg := &segment{size: 100, firstTS: 500_000}
	p := &partitionActor{disk: &segmentLog{segs: []*segment{seg}}}
	p.cfg.Now = func() time.Time { return now }
	at := func(ts int64) bool { return p.timeRollDue(&header{MaxTimestamp: ts}) }

	if at(10_000_000) {
		t.Fatal("rolled with segment.ms not set")
	}
	p.cfg.Timing = Timing{SegmentMS: 1000}
	if at(501_000) || !at(501_001) {
		t.Fatal("segment.ms=1000 from the first batch's 500000: rolls past 501000 only")
	}
	seg.size = 0
	if at(900_000) {
		t.Fatal("an empty segment rolled")
	}
	seg.size = 100

	p.cfg.Timing = Timing{SegmentMS: 1000, SegmentJitterMS: 400}
	p.clock.seg = nil
	at(0) // draws the segment's jitter
	j := p.clock.jitter
	if j < 0 || j >= 400 {
		t.Fatalf("jitter %d outside [0, 400)", j)
	}
	if at(501_000-j) || !at(501_001-j) {
		t.Fatalf("jitter %d not taken off segment.ms", j)
	}
	if p.clock.jitter != j {
		t.Fatal("the jitter changed within a segment's life")
	}

	seg.firstTS = -1 // the first batch without a timestamp: the broker's clock
	p.cfg.Timing = Timing{SegmentMS: 1000}
	p.clock.seg = nil
	at(0) // the segment is seen active from now
	now = now.Add(1000 * time.Millisecond)
	if at(0) {
		t.Fatal("rolled at segment.ms exactly")
	}
	now = now.Add(time.Millisecond)
	if !at(0) {
		t.Fatal("not rolled past segment.ms by the broker's clock")
	}
}
