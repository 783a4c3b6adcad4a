package txn

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker"
	"kaas/e2e/eos"
)

// BenchmarkEOSPipeline is the exactly-once pipeline's throughput, kaas beside kfake (in
// memory) in the same run: three consume-transform-produce members (franz-go's
// GroupTransactSession at read_committed, e2e/eos) copy a topic of 100,000 records over 6
// partitions to another, each transaction holding one poll of up to 500 records and the
// group's offsets. Once the three are in the group (Stable, every member assigned), the
// time runs from the input's first record produced (acks=all, idempotent) until the
// group's committed offsets reach the input's end; records/s is the input over that
// time.
//
//	go test -run NONE -bench EOSPipeline -benchtime 1x ./e2e/txn/
func BenchmarkEOSPipeline(b *testing.B) {
	spareProc.Do(func() { broker.SpareProc() })
	const n = 100_000
	for i := 0; i < b.N; i++ {
		kaasAddr, _ := benchKaas(b)
		kaas := pipelineRecordsPerSecond(b, kaasAddr, n)
		fake := pipelineRecordsPerSecond(b, benchKfake(b), n)
		b.ReportMetric(kaas, "kaas_records/s")
		b.ReportMetric(fake, "kfake_records/s")
		b.ReportMetric(kaas/fake, "ratio")
	}
}

func pipelineRecordsPerSecond(b *testing.B, addr string, n int) float64 {
	const (
		in, out, grp = "pipe-in", "pipe-out", "pipe"
		parts        = 6
	)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(in))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	for _, t := range []string{in, out} {
		if _, err := adm.CreateTopic(ctx, parts, 1, nil, t); err != nil {
			b.Fatalf("create %s: %v", t, err)
		}
	}
	l := eos.NewLedger()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for m := 0; m < 3; m++ {
		id := fmt.Sprintf("pipe-%d", m)
		mem := eos.Member{Seeds: []string{addr}, TxnID: id, Tag: id, Group: grp, In: in, Out: out,
			SessionTimeout: 10 * time.Second, RetryTimeout: 30 * time.Second, MaxRecords: 500}
		wg.Go(func() { mem.Run(l, stop) })
	}
	defer func() {
		l.Stop()
		close(stop)
		wg.Wait()
	}()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		gs, err := adm.DescribeGroups(ctx, grp)
		if err == nil && gs[grp].State == "Stable" && len(gs[grp].Members) == 3 && assignedAll(gs[grp]) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the pipeline's group on %s not stable after 5 minutes", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	}
	start := time.Now()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		b.Fatalf("produce input: %v", err)
	}
	ends, err := adm.ListEndOffsets(ctx, in)
	if err != nil {
		b.Fatal(err)
	}
	for {
		fetched, err := adm.FetchOffsets(ctx, grp)
		done := err == nil
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := fetched.Lookup(in, o.Partition)
			if !ok || c.At != o.Offset {
				done = false
			}
		})
		if done {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("pipeline on %s not done after 5 minutes (%d transactions committed)", addr, l.Commits())
		}
		time.Sleep(10 * time.Millisecond) // a benchmark's poll: the end is read, not waited on
	}
	return float64(n) / time.Since(start).Seconds()
}

// assignedAll reports whether every member of g holds partitions.
func assignedAll(g kadm.DescribedGroup) bool {
	for _, m := range g.Members {
		a, ok := m.Assigned.AsConsumer()
		if !ok || len(a.Topics) == 0 {
			return false
		}
	}
	return true
}
