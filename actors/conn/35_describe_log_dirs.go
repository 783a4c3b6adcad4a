package conn

import (
	"errors"
	"path/filepath"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
	"kaas/storage"
)

// DescribeLogDirs (key 35), v1–v5 (KIP-113; v0 was removed in Apache 4.0, KIP-896).
//
//	v1: same as v0. v2: flexible. v3: top-level error_code. v4: total_bytes and
//	usable_bytes of each dir's volume (KIP-827). v5: is_cordoned (KIP-1066; kaas
//	cordons no dir: false).
//
// kaas has one log dir, the data volume's topics directory (partition.LogDir), listed
// always, as Apache lists each of its live dirs. Under it, per topic, the partitions this
// broker leads that the request names (null topics: all of them), each with its
// segments' bytes, asked of its partition actor; a partition led elsewhere, unknown, or
// whose log is not open here is left out, as Apache leaves out a partition it holds no
// log of. offset_lag is 0 (a leader's high watermark is never past its log end) and
// is_future false (no AlterReplicaLogDirs). total_bytes and usable_bytes come from
// statfs of the dir, run off the actor; a dir statfs fails on answers
// KAFKA_STORAGE_ERROR. Needs DESCRIBE on the cluster (authz.go): else
// CLUSTER_AUTHORIZATION_FAILED (v3+) and no dirs.
//
// Unlike Apache, a topic led here that the request does not name is not listed (Apache
// lists every topic of the dir, those not asked with no partitions).
func init() { register(35, 1, 5, handleDescribeLogDirs) }

// errStatfsTimedOut is the dir's answer when its statfs has not returned within the
// request's bound (a network volume not answering).
var errStatfsTimedOut = errors.New("statfs did not return in time")

// usage is a statfs answer of the log dir.
type usage struct {
	total, usable int64
	err           error
}

func handleDescribeLogDirs(c *Call) {
	req := c.Req.(*kmsg.DescribeLogDirsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	if noTopics(c) || c.Env.Config == nil {
		c.Respond(resp)
		return
	}
	var parts []partition.LedPartition
	routes := c.Env.Catalog.Routes()
	if req.Topics == nil {
		parts = routes.Led()
	} else {
		seen := map[partition.TopicPartition]bool{}
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				tp := partition.TopicPartition{Topic: t.Topic, Partition: p}
				if seen[tp] {
					continue
				}
				seen[tp] = true
				if r := routes.Find(t.Topic, partition.TopicID{}, p); r.PID != nil {
					parts = append(parts, partition.LedPartition{Topic: t.Topic, Partition: p, PID: r.PID})
				}
			}
		}
		sort.Slice(parts, func(i, j int) bool {
			if parts[i].Topic != parts[j].Topic {
				return parts[i].Topic < parts[j].Topic
			}
			return parts[i].Partition < parts[j].Partition
		})
	}
	dir := partition.LogDir(c.Env.Config.DataDir)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	log := c.Log()
	a := c.conn
	// Answer 0 is the dir's statfs, answer i+1 partition i's size.
	g := a.newGather(c, len(parts)+1, func(i int) any {
		if i == 0 {
			return &usage{err: errStatfsTimedOut}
		}
		return &partition.LogSize{ErrorCode: kerr.RequestTimedOut.Code}
	}, func(results []any) kmsg.Response {
		rd := kmsg.NewDescribeLogDirsResponseDir()
		rd.Dir = dir
		if u := results[0].(*usage); u.err != nil {
			log.Warn().Err(u.err).Str("dir", dir).Msg("log_dir_statfs_failed")
			rd.ErrorCode = kerr.KafkaStorageError.Code
		} else {
			rd.TotalBytes, rd.UsableBytes = u.total, u.usable
		}
		for i, p := range parts {
			size := results[i+1].(*partition.LogSize)
			if size.ErrorCode != 0 {
				continue
			}
			if n := len(rd.Topics); n == 0 || rd.Topics[n-1].Topic != p.Topic {
				rt := kmsg.NewDescribeLogDirsResponseDirTopic()
				rt.Topic = p.Topic
				rd.Topics = append(rd.Topics, rt)
			}
			rp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			rp.Partition, rp.Size = p.Partition, size.Size
			rt := &rd.Topics[len(rd.Topics)-1]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Dirs = append(resp.Dirs, rd)
		return resp
	})
	a.askOff(g, 0, func() any {
		total, usable, err := storage.Usage(dir)
		return &usage{total: total, usable: usable, err: err}
	})
	for i, p := range parts {
		a.ask(g, i+1, p.PID, func(reply actor.Promise) any { return partition.LogSizeMessage(reply) })
	}
	a.start(g, partition.DefaultRequestTimeout)
}
