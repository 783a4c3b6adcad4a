package offsets

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// A consumer state saved whole, then changed by deltas: the live state, the journal's
// records replayed over the whole state (as a restart does over the file), and the file
// rewritten from the result all hold the state a whole save of the end would hold.
func TestConsumerDeltaReplaysToWholeState(t *testing.T) {
	whole := GroupMeta{ProtocolType: "consumer", Generation: 3, Consumer: json.RawMessage(
		`{"version":1,"group_epoch":3,"target_epoch":3,"topic_partitions":{"t":2},"members":[` +
			`{"member_id":"a","member_epoch":3},{"member_id":"b","member_epoch":2}]}`)}
	deltas := []*ConsumerDelta{
		{Header: json.RawMessage(`{"version":1,"group_epoch":4,"target_epoch":3,"topic_partitions":{"t":2}}`),
			Set: map[string]json.RawMessage{"c": json.RawMessage(`{"member_id":"c","member_epoch":0}`)}},
		{Header: json.RawMessage(`{"version":1,"group_epoch":5,"target_epoch":5,"topic_partitions":{"t":2}}`),
			Set: map[string]json.RawMessage{"b": json.RawMessage(`{"member_id":"b","member_epoch":5}`)}, Del: []string{"a"}},
	}
	want := `{"version":1,"group_epoch":5,"target_epoch":5,"topic_partitions":{"t":2},"members":[` +
		`{"member_id":"b","member_epoch":5},{"member_id":"c","member_epoch":0}]}`

	// Live: SaveMeta applied one after the other, each recorded.
	s, exists := newState(), false
	var cache *metaCache
	var ops []op
	rec := &recorder{cache: &cache}
	apply(&s, &exists, queued{msg: &SaveMeta{Meta: whole}}, time.Now(), rec)
	for i, d := range deltas {
		apply(&s, &exists, queued{msg: &SaveMeta{Meta: GroupMeta{ProtocolType: "consumer", Generation: int32(4 + i)}, Consumer: d}}, time.Now(), rec)
	}
	ops = rec.ops
	if string(s.meta.whole().Consumer) != want || s.meta.Generation != 5 {
		t.Fatalf("live state %s (generation %d), want %s", s.meta.whole().Consumer, s.meta.Generation, want)
	}
	// The journal: through its encoding, replayed over the whole state (the file).
	data, err := encodeRecord("g", 0, ops[1:])
	if err != nil {
		t.Fatal(err)
	}
	_, decoded, err := decodeRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	r, rexists := newState(), true
	r.meta = whole
	if err := replayOps(&r, &rexists, decoded); err != nil {
		t.Fatal(err)
	}
	if string(r.meta.whole().Consumer) != want {
		t.Fatalf("replayed %s, want %s", r.meta.whole().Consumer, want)
	}
	// The file written from it reads back as the same whole state.
	file, err := encodeFile("g", r)
	if err != nil {
		t.Fatal(err)
	}
	_, back, err := decodeFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(back.meta.Consumer, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("file holds %s, want %s", back.meta.Consumer, want)
	}
}

// A delta that is not JSON is refused, and leaves the state as it was.
func TestConsumerDeltaRefusesBadJSON(t *testing.T) {
	s, exists := newState(), false
	var cache *metaCache
	rec := &recorder{cache: &cache}
	res, changed, _ := apply(&s, &exists, queued{msg: &SaveMeta{Meta: GroupMeta{ProtocolType: "consumer"},
		Consumer: &ConsumerDelta{}}}, time.Now(), rec)
	if r, ok := res.(*Result); !ok || r.ErrorCode == 0 || changed || len(rec.ops) != 0 {
		t.Fatalf("bad delta: %+v changed %v ops %d", res, changed, len(rec.ops))
	}
}
