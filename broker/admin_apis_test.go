package broker_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/broker/brokertest"
	"kaas/config"
)

// request sends req at exactly version v to addr, over a connection of its own.
func request[R kmsg.Response](t *testing.T, addr string, req kmsg.Request, v int16) R {
	t.Helper()
	r, _ := roundtrip(t, addr, req, v)
	return r.(R)
}

func describeCluster(t *testing.T, addr string, v int16, mutate func(*kmsg.DescribeClusterRequest)) *kmsg.DescribeClusterResponse {
	t.Helper()
	req := kmsg.NewPtrDescribeClusterRequest()
	if mutate != nil {
		mutate(req)
	}
	return request[*kmsg.DescribeClusterResponse](t, addr, req, v)
}

// allClusterOperations are the CLUSTER operations Apache answers with no authorizer.
const allClusterOperations = 1<<4 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12

// DescribeCluster at every version: the cluster id, this broker as the one broker and as
// controller, with its endpoint on the listener asked; cluster_authorized_operations only
// when asked (every operation with authorization off); endpoint types other than brokers
// refused with Apache's codes.
func TestDescribeCluster(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.NodeID = 3 })
	addr := b.Addr()
	host, port, _ := net.SplitHostPort(addr)
	for v := int16(0); v <= 2; v++ {
		r := describeCluster(t, addr, v, nil)
		if r.ErrorCode != 0 || r.ClusterID != b.ClusterID() || r.ControllerID != 3 || len(r.Brokers) != 1 {
			t.Fatalf("v%d: %+v", v, r)
		}
		if br := r.Brokers[0]; br.NodeID != 3 || br.Host != host || strconv.Itoa(int(br.Port)) != port || br.IsFenced {
			t.Fatalf("v%d broker: %+v, want 3 at %s", v, br, b.Addr())
		}
		if r.ClusterAuthorizedOperations != -2147483648 {
			t.Fatalf("v%d: authorized operations %d not asked for", v, r.ClusterAuthorizedOperations)
		}
		if v >= 1 && r.EndpointType != 1 {
			t.Fatalf("v%d: endpoint type %d", v, r.EndpointType)
		}
		r = describeCluster(t, addr, v, func(r *kmsg.DescribeClusterRequest) { r.IncludeClusterAuthorizedOperations = true })
		if r.ClusterAuthorizedOperations != allClusterOperations {
			t.Fatalf("v%d: authorized operations %b, want %b", v, r.ClusterAuthorizedOperations, allClusterOperations)
		}
	}
	for _, tc := range []struct {
		typ  int8
		code int16
	}{{2, kerr.MismatchedEndpointType.Code}, {0, kerr.UnsupportedEndpointType.Code}, {7, kerr.UnsupportedEndpointType.Code}} {
		r := describeCluster(t, addr, 1, func(r *kmsg.DescribeClusterRequest) { r.EndpointType = tc.typ })
		if r.ErrorCode != tc.code || r.ErrorMessage == nil || len(r.Brokers) != 0 {
			t.Fatalf("endpoint type %d: %+v, want code %d", tc.typ, r, tc.code)
		}
	}
}

// With the authorizer on, anyone may describe the cluster; the authorized operations
// are none without DESCRIBE on the cluster, and what the ACLs allow with it.
func TestDescribeClusterAuthorizedOperations(t *testing.T) {
	b, admin := authzBroker(t)
	anon := b.ListenerAddr("PLAINTEXT")
	ask := func(r *kmsg.DescribeClusterRequest) { r.IncludeClusterAuthorizedOperations = true }
	setACLs(t, admin)
	if r := describeCluster(t, anon, 2, ask); r.ErrorCode != 0 || len(r.Brokers) != 1 || r.ClusterAuthorizedOperations != 0 {
		t.Fatalf("without DESCRIBE: %+v", r)
	}
	setACLs(t, admin, allow(auth.Cluster, auth.ClusterName, auth.Describe), allow(auth.Cluster, auth.ClusterName, auth.Alter))
	if r := describeCluster(t, anon, 2, ask); r.ClusterAuthorizedOperations != 1<<8|1<<7 {
		t.Fatalf("with DESCRIBE and ALTER: operations %b", r.ClusterAuthorizedOperations)
	}
	if r := describeCluster(t, anon, 2, nil); r.ClusterAuthorizedOperations != -2147483648 {
		t.Fatalf("not asked: operations %d", r.ClusterAuthorizedOperations)
	}
}

// In a cluster, every broker names the same brokers and the lowest live one as
// controller; a stopped broker leaves the list, and comes back in it fenced when the
// fenced brokers are asked for (v2).
func TestDescribeClusterInACluster(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	ca, cb := a.Addr(), b.Addr()
	ids := func(r *kmsg.DescribeClusterResponse) (live, fenced []int32) {
		for _, br := range r.Brokers {
			if br.IsFenced {
				fenced = append(fenced, br.NodeID)
			} else {
				live = append(live, br.NodeID)
			}
		}
		return live, fenced
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, addr := range []string{ca, cb} {
		for {
			r := describeCluster(t, addr, 2, nil)
			if live, _ := ids(r); len(live) == 2 && r.ControllerID == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("both brokers never listed: %+v", r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		r := describeCluster(t, cb, 2, nil)
		if live, fenced := ids(r); len(live) == 1 && live[0] == 1 && len(fenced) == 0 && r.ControllerID == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker 0 never left: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := describeCluster(t, cb, 2, func(r *kmsg.DescribeClusterRequest) { r.IncludeFencedBrokers = true })
	if live, fenced := ids(r); len(live) != 1 || live[0] != 1 || len(fenced) != 1 || fenced[0] != 0 || r.ControllerID != 1 {
		t.Fatalf("with fenced brokers: %+v", r)
	}
}

// segmentBytes is the bytes of a partition's segment files on disk.
func segmentBytes(t *testing.T, dataDir, topic string, p int32) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dataDir, "topics", topic, strconv.Itoa(int(p)), "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

// DescribeLogDirs: one dir, the data volume's topics directory, with its volume's size
// and free bytes; every partition this broker leads with its segments' bytes, or only
// those named (unknown ones left out); each version decodes.
func TestDescribeLogDirs(t *testing.T) {
	b := brokertest.Start(t, nil)
	cl := directClient(t, b.Addr())
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "logs"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "other"); err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 5; i++ {
		r := &kgo.Record{Topic: "logs", Partition: 0, Value: []byte("a record of some bytes")}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := b.Env().Config.DataDir
	wantDir, _ := filepath.Abs(filepath.Join(dataDir, "topics"))
	dirs, err := adm.DescribeBrokerLogDirs(ctx, 0, nil)
	if err != nil || len(dirs) != 1 {
		t.Fatalf("all: %v %+v", err, dirs)
	}
	d := dirs[wantDir]
	if d.Err != nil || d.Dir != wantDir || d.TotalBytes <= 0 || d.UsableBytes <= 0 || d.UsableBytes > d.TotalBytes {
		t.Fatalf("dir: %+v, want %s with its volume's bytes", d, wantDir)
	}
	p0, ok := d.Topics.Lookup("logs", 0)
	if !ok || p0.Size == 0 || p0.Size != segmentBytes(t, dataDir, "logs", 0) {
		t.Fatalf("logs/0: %+v, %d bytes on disk", p0, segmentBytes(t, dataDir, "logs", 0))
	}
	if p1, ok := d.Topics.Lookup("logs", 1); !ok || p1.Size != 0 {
		t.Fatalf("logs/1: %+v", p1)
	}
	if _, ok := d.Topics.Lookup("other", 0); !ok {
		t.Fatalf("other/0 missing: %+v", d.Topics)
	}

	named := kadm.TopicsSet{}
	named.Add("logs", 0, 7)
	named.Add("nope", 0)
	dirs, err = adm.DescribeBrokerLogDirs(ctx, 0, named)
	if err != nil {
		t.Fatal(err)
	}
	if got := dirs[wantDir].Topics; len(got) != 1 || len(got["logs"]) != 1 || got["logs"][0].Size != p0.Size {
		t.Fatalf("named: %+v", got)
	}

	for v := int16(1); v <= 5; v++ {
		r := request[*kmsg.DescribeLogDirsResponse](t, b.Addr(), kmsg.NewPtrDescribeLogDirsRequest(), v)
		if r.ErrorCode != 0 || len(r.Dirs) != 1 || r.Dirs[0].Dir != wantDir || len(r.Dirs[0].Topics) != 2 {
			t.Fatalf("v%d: %+v", v, r)
		}
		if total := r.Dirs[0].TotalBytes; (v < 4) != (total == -1) || r.Dirs[0].IsCordoned {
			t.Fatalf("v%d: total bytes %d, cordoned %v", v, total, r.Dirs[0].IsCordoned)
		}
	}
}

// DescribeLogDirs needs DESCRIBE on the cluster: without it, CLUSTER_AUTHORIZATION_FAILED
// (v3+) and no dirs.
func TestDescribeLogDirsAuthorization(t *testing.T) {
	b, admin := authzBroker(t)
	anon := b.ListenerAddr("PLAINTEXT")
	setACLs(t, admin)
	for _, v := range []int16{1, 5} {
		r := request[*kmsg.DescribeLogDirsResponse](t, anon, kmsg.NewPtrDescribeLogDirsRequest(), v)
		if len(r.Dirs) != 0 || v >= 3 && r.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
			t.Fatalf("v%d without DESCRIBE: %+v", v, r)
		}
	}
	setACLs(t, admin, allow(auth.Cluster, auth.ClusterName, auth.Describe))
	if r := request[*kmsg.DescribeLogDirsResponse](t, anon, kmsg.NewPtrDescribeLogDirsRequest(), 5); r.ErrorCode != 0 || len(r.Dirs) != 1 {
		t.Fatalf("with DESCRIBE: %+v", r)
	}
}

// dtp is one DescribeTopicPartitions request.
func dtp(t *testing.T, addr string, limit int32, cursor *kmsg.DescribeTopicPartitionsRequestCursor, topics ...string) *kmsg.DescribeTopicPartitionsResponse {
	t.Helper()
	req := kmsg.NewPtrDescribeTopicPartitionsRequest()
	req.ResponsePartitionLimit, req.Cursor = limit, cursor
	for _, name := range topics {
		rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
		rt.Topic = name
		req.Topics = append(req.Topics, rt)
	}
	return request[*kmsg.DescribeTopicPartitionsResponse](t, addr, req, 0)
}

// page renders a response as "topic:code[partitions] ... >next".
func page(r *kmsg.DescribeTopicPartitionsResponse) string {
	var b strings.Builder
	for _, rt := range r.Topics {
		fmt.Fprintf(&b, "%s:%d%v ", *rt.Topic, rt.ErrorCode, partitionsOf(rt))
	}
	if r.NextCursor != nil {
		fmt.Fprintf(&b, ">%s/%d", r.NextCursor.Topic, r.NextCursor.Partition)
	}
	return strings.TrimSpace(b.String())
}

func partitionsOf(rt kmsg.DescribeTopicPartitionsResponseTopic) []int32 {
	out := []int32{}
	for _, p := range rt.Partitions {
		out = append(out, p.Partition)
	}
	return out
}

func cursorAt(topic string, p int32) *kmsg.DescribeTopicPartitionsRequestCursor {
	c := kmsg.NewDescribeTopicPartitionsRequestCursor()
	c.Topic, c.Partition = topic, p
	return &c
}

// DescribeTopicPartitions pages every topic, or the named ones, as Apache does: the
// limit counts partitions, a topic cut short continues at its next partition, a page
// that ends with a topic continues at the next topic's partition 0. Partitions are
// Metadata's (leader, epoch, the one replica as ISR), unknown named topics have their
// code, a bad cursor is INVALID_REQUEST.
func TestDescribeTopicPartitions(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.NodeID = 2 })
	addr := b.Addr()
	adm := kadm.NewClient(mustClient(t, addr))
	ctx := context.Background()
	for name, n := range map[string]int32{"a": 3, "b": 1, "c": 2} {
		if _, err := adm.CreateTopic(ctx, n, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		limit  int32
		cursor *kmsg.DescribeTopicPartitionsRequestCursor
		topics []string
		want   string
	}{
		{2000, nil, nil, "a:0[0 1 2] b:0[0] c:0[0 1]"},
		{2, nil, nil, "a:0[0 1] >a/2"},
		{2, cursorAt("a", 2), nil, "a:0[2] b:0[0] >c/0"},
		{2, cursorAt("c", 0), nil, "c:0[0 1]"},
		{0, nil, nil, "a:0[0] >a/1"}, // at least one partition
		{2000, cursorAt("b", 5), nil, "b:0[] c:0[0 1]"},
		{2000, nil, []string{"c", "nope", "a", "c"}, "a:0[0 1 2] c:0[0 1] nope:3[]"},
		{2000, nil, []string{"bad name!"}, "bad name!:17[]"},
		{3, cursorAt("a", 1), []string{"c", "a"}, "a:0[1 2] c:0[0] >c/1"},
		{2000, cursorAt("b", 0), []string{"c", "a"}, "c:42[] a:42[]"}, // the cursor's topic not named
		{2000, cursorAt("a", -1), []string{"a"}, "a:42[]"},
		{2000, cursorAt("nope", 0), nil, ""}, // every topic, the cursor's not among them
	} {
		r := dtp(t, addr, tc.limit, tc.cursor, tc.topics...)
		if got := page(r); got != tc.want {
			t.Errorf("limit %d cursor %+v topics %v: %q, want %q", tc.limit, tc.cursor, tc.topics, got, tc.want)
		}
	}
	md, err := adm.Metadata(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	r := dtp(t, addr, 2000, nil, "a")
	rt := r.Topics[0]
	if rt.TopicID != md.Topics["a"].ID || rt.AuthorizedOperations != 1<<3|1<<4|1<<5|1<<6|1<<7|1<<8|1<<10|1<<11 || rt.IsInternal {
		t.Fatalf("topic a: %+v", rt)
	}
	for _, p := range rt.Partitions {
		want := md.Topics["a"].Partitions[p.Partition]
		if p.ErrorCode != 0 || p.LeaderID != 2 || p.LeaderEpoch != want.LeaderEpoch ||
			fmt.Sprint(p.Replicas, p.ISR, p.EligibleLeaderReplicas, p.OfflineReplicas) != "[2] [2] [] []" {
			t.Fatalf("partition %+v, Metadata's %+v", p, want)
		}
	}
}

// DescribeTopicPartitions authorizes DESCRIBE per topic: a named topic denied comes
// after the rest with TOPIC_AUTHORIZATION_FAILED; asked for every topic, the denied
// ones are left out and count nothing against the page.
func TestDescribeTopicPartitionsAuthorization(t *testing.T) {
	b, admin := authzBroker(t)
	adm := kadm.NewClient(admin)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	setACLs(t, admin, allow(auth.Topic, "b", auth.Describe), allow(auth.Topic, "c", auth.Describe), allow(auth.Topic, "c", auth.Read))
	anon := b.ListenerAddr("PLAINTEXT")
	if got := page(dtp(t, anon, 1, nil)); got != "b:0[0] >c/0" {
		t.Fatalf("every topic: %q", got)
	}
	r := dtp(t, anon, 2000, nil, "a", "c")
	if got := page(r); got != "c:0[0] a:29[]" {
		t.Fatalf("named: %q", got)
	}
	if ops := r.Topics[0].AuthorizedOperations; ops != 1<<8|1<<3 {
		t.Fatalf("c's authorized operations %b", ops)
	}
	if ops := r.Topics[1].AuthorizedOperations; ops != -2147483648 {
		t.Fatalf("a's authorized operations %d", ops)
	}
}
