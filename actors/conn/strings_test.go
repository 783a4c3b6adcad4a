package conn

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestLongString(t *testing.T) {
	long := strings.Repeat("x", MaxStringBytes+1)
	limit := strings.Repeat("x", MaxStringBytes)
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group = limit
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte(long)}}
	if f, n, ok := LongString(join); ok {
		t.Fatalf("a request at the limit (and long bytes) refused: %s %d", f, n)
	}
	join.InstanceID = &long
	if f, n, ok := LongString(join); !ok || f != "InstanceID" || n != len(long) {
		t.Fatalf("long instance id: %q %d %v", f, n, ok)
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group = "g"
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Metadata: &long}}}}
	if f, _, ok := LongString(commit); !ok || f != "Metadata" {
		t.Fatalf("long metadata of a partition: %q %v", f, ok)
	}
	// The error names the field and its length, never the client's bytes.
	if err := checkStrings(commit); err == nil || strings.Contains(err.Error(), long[:64]) {
		t.Fatalf("checkStrings: %v", err)
	}
}

func BenchmarkLongStringOffsetCommit(b *testing.B) {
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group = "my-group"
	commit.MemberID = "member-1-6f0e"
	md := ""
	for i := range 10 {
		ps := make([]kmsg.OffsetCommitRequestTopicPartition, 10)
		for j := range ps {
			ps[j].Partition = int32(j)
			ps[j].Metadata = &md
		}
		commit.Topics = append(commit.Topics, kmsg.OffsetCommitRequestTopic{Topic: "topic-" + string(rune('a'+i)), Partitions: ps})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := LongString(commit); ok {
			b.Fatal("refused")
		}
	}
}
