package partition

import (
	"sort"

	"kaas/actors/actor"
)

// What DescribeLogDirs asks of the partitions: which ones this broker leads, and each
// one's size on disk, answered by its actor (a connection never reads a partition's
// files).

// LogDir is the directory DescribeLogDirs names as the broker's one log dir: the topics
// directory of the data volume (<data.dir>/topics).
func LogDir(dataDir string) string { return topicsDir(dataDir) }

// LogSizeMessage asks a partition actor for its log's size; reply gets *LogSize.
func LogSizeMessage(reply actor.Promise) any { return &logSize{reply: reply} }

// LogSize is one partition of a DescribeLogDirs: the bytes of its segments. ErrorCode
// is set when the log is not open here: NOT_LEADER_OR_FOLLOWER while the partition waits
// for its lock, KAFKA_STORAGE_ERROR when it could not be opened.
type LogSize struct {
	ErrorCode int16
	Size      int64
}

func (p *partitionActor) logSize() *LogSize {
	if p.disk == nil {
		return &LogSize{ErrorCode: p.closedCode(), Size: -1}
	}
	return &LogSize{Size: p.disk.Size()}
}

// LedPartition is a partition whose actor runs on this broker.
type LedPartition struct {
	Topic     string
	Partition int32
	PID       *actor.PID
}

// Led lists the partitions of this snapshot that have an actor here, by topic name then
// partition.
func (r Routes) Led() []LedPartition {
	names := make([]string, 0, len(r.snap.topics))
	for name := range r.snap.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []LedPartition
	for _, name := range names {
		for p, pid := range r.snap.topics[name].pids {
			if pid != nil {
				out = append(out, LedPartition{Topic: name, Partition: int32(p), PID: pid})
			}
		}
	}
	return out
}
