package offsets

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// FuzzDecodeRecord: a journal record is what a crash or a bad disk may have corrupted
// (the frame's checksum passes on a flipped bit with odds of one in four billion, and a
// frame written by another version passes it every time). The decoder never panics,
// whatever it accepts (group, ownership epoch, ops) encodes back, in either format, to
// something it decodes the same, and applying it to a state does not panic either.
func FuzzDecodeRecord(f *testing.F) {
	for i, ops := range [][]op{
		{{Set: []fileOffset{{Topic: "t", Partition: 0, Offset: 42, LeaderEpoch: -1}}}},
		{{Set: []fileOffset{{Topic: "t", Partition: 0, Offset: -2, LeaderEpoch: -1}, {Topic: "t", Partition: 1, Offset: math.MinInt64, LeaderEpoch: math.MinInt32}}}},
		{{Del: []fileTP{{Topic: "t", Partition: 1}}}, {Clear: true}},
		{{Meta: []byte(`{"protocol_type":"consumer","generation":3}`), NoCreate: true}},
	} {
		for _, epoch := range []uint64{0, uint64(i) + 1, 1 << 63} {
			for _, enc := range []func(string, uint64, []op) ([]byte, error){encodeRecord, encodeCompactRecord} {
				b, err := enc("g", epoch, ops)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(b)
			}
		}
	}
	f.Add([]byte(`{"group":"\ud800","ops":[{"set":[],"del":[]}]}`))
	f.Add([]byte(`{"group":null,"ops":[]}`))
	f.Add([]byte(`{"group":"g","epoch":-1,"ops":[]}`))
	f.Add([]byte(`{"group":"g","epoch":18446744073709551616,"ops":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		group, epoch, ops, err := decodeRecordEpoch(b)
		if err != nil {
			return
		}
		again, err := encodeRecord(group, epoch, ops)
		if err != nil {
			t.Fatalf("encode of a decoded record: %v", err)
		}
		group2, epoch2, ops2, err := decodeRecordEpoch(again)
		if err != nil || group2 != group || epoch2 != epoch || !sameOps(ops2, ops) {
			t.Fatalf("round trip of %q: %q epoch %d %+v %v", b, group2, epoch2, ops2, err)
		}
		// And through the compact format, whichever format it was read from.
		compact, err := encodeCompactRecord(group, epoch, ops2)
		if err != nil {
			t.Fatalf("compact encode of a decoded record: %v", err)
		}
		group3, epoch3, ops3, err := decodeRecordEpoch(compact)
		if err != nil || group3 != group || epoch3 != epoch || !sameOps(ops3, ops2) {
			t.Fatalf("compact round trip of %q: %q epoch %d %+v %v", b, group3, epoch3, ops3, err)
		}
		s, exists := newState(), false
		_ = replayOps(&s, &exists, ops)
	})
}

// sameOps compares ops, their metas as JSON values (the encoder may escape a meta's
// characters otherwise than the bytes it was read from).
func sameOps(a, b []op) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		var ma, mb any
		if (a[i].Meta == nil) != (b[i].Meta == nil) {
			return false
		}
		if a[i].Meta != nil {
			if json.Unmarshal(a[i].Meta, &ma) != nil || json.Unmarshal(b[i].Meta, &mb) != nil || !reflect.DeepEqual(ma, mb) {
				return false
			}
		}
		x, y := a[i], b[i]
		x.Meta, y.Meta = nil, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}
