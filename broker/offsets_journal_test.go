package broker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// TestCommitsLiveInTheJournalUntilCheckpointed: over the wire, acknowledged commits are
// in the broker's offsets journal before any group file is written (checkpoint interval
// of an hour); a broker started on a copy of the data dir taken while the first one runs
// (a crash image) replays them before it serves; a clean stop writes no group file and
// leaves them to the journal, which the next start replays. The records are in the
// compact format of a broker alone.
func TestCommitsLiveInTheJournalUntilCheckpointed(t *testing.T) {
	dir := t.TempDir()
	b := brokertest.Start(t, func(c *config.Config) {
		c.DataDir = dir
		c.HTTPListen = "127.0.0.1:0"
		c.OffsetsCheckpointInterval = time.Hour
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	groups := []string{"billing", "../escape", "shipping"}
	for i, g := range groups {
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: "orders", Partition: 0, At: int64(10 + i), LeaderEpoch: -1})
		offs.Add(kadm.Offset{Topic: "orders", Partition: 1, At: int64(20 + i), LeaderEpoch: -1})
		resp, err := adm.CommitOffsets(ctx, g, offs)
		if err != nil || resp.Error() != nil {
			t.Fatalf("commit %s: %v %v", g, err, resp.Error())
		}
	}
	for _, g := range groups {
		if _, err := os.Stat(filepath.Join(offsets.Dir(dir), offsets.FileName(g))); !os.IsNotExist(err) {
			t.Fatalf("group file of %s written before its checkpoint (err %v)", g, err)
		}
	}
	resp, err := http.Get("http://" + b.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `kaas_offsets_journal_writes_total{result="ok"}`) {
		t.Fatal("metrics lack kaas_offsets_journal_writes_total")
	}

	// A broker alone journals its records in the compact format (its first byte, 1;
	// JSON, which older versions wrote, starts with '{'): those are what the starts below
	// replay.
	records := 0
	segs, _ := filepath.Glob(filepath.Join(offsets.JournalDir(dir, b.Env().NodeID), "*.log"))
	for _, seg := range segs {
		first, _ := journal.ParseSegmentName(filepath.Base(seg))
		data, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range journal.ScanSegment(data, first).Records {
			if r.Data[0] != 1 {
				t.Fatalf("journal record %d of %s starts with %q, not the compact format's byte", r.Seq, seg, r.Data[0])
			}
			records++
		}
	}
	if records != len(groups) {
		t.Fatalf("%d journal records, want %d (one commit per group)", records, len(groups))
	}

	img := t.TempDir()
	brokertest.CopyTree(t, dir, img)
	b2 := brokertest.Start(t, func(c *config.Config) { c.DataDir = img })
	check := func(addr string) {
		t.Helper()
		cl2, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer cl2.Close()
		adm2 := kadm.NewClient(cl2)
		for i, g := range groups {
			got, err := adm2.FetchOffsets(ctx, g)
			if err != nil || got.Error() != nil {
				t.Fatalf("fetch %s: %v %v", g, err, got.Error())
			}
			for p, want := range map[int32]int64{0: int64(10 + i), 1: int64(20 + i)} {
				if o, ok := got.Lookup("orders", p); !ok || o.At != want {
					t.Fatalf("group %s orders-%d: %+v, want %d", g, p, o, want)
				}
			}
		}
	}
	check(b2.Addr())
	// The start left the files to be written behind; the journal writes them soon after.
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, g := range groups {
			if _, err := os.Stat(filepath.Join(offsets.Dir(img), offsets.FileName(g))); err != nil {
				return fmt.Errorf("group file of %s after the start: %w", g, err)
			}
		}
		return nil
	})

	jdir := offsets.JournalDir(dir, b.Env().NodeID)
	if segs, _ := filepath.Glob(filepath.Join(jdir, "*.log")); len(segs) == 0 {
		t.Fatalf("no journal segment in %s while the broker runs", jdir)
	}
	// A clean stop of a broker alone writes no group file: what the files lack stays in
	// the journal's segments (fsynced before each commit was acknowledged), and the next
	// start replays it before it serves.
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	if err := b.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if _, err := os.Stat(filepath.Join(offsets.Dir(dir), offsets.FileName(g))); !os.IsNotExist(err) {
			t.Fatalf("group file of %s written by a clean stop (err %v)", g, err)
		}
	}
	if segs, _ := filepath.Glob(filepath.Join(jdir, "*.log")); len(segs) == 0 {
		t.Fatalf("no journal segment in %s after a clean stop: the commits are nowhere", jdir)
	}
	b3 := brokertest.Start(t, func(c *config.Config) { c.DataDir = dir })
	check(b3.Addr())
	// The files are written behind, then the segments go.
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, g := range groups {
			if _, err := os.Stat(filepath.Join(offsets.Dir(dir), offsets.FileName(g))); err != nil {
				return fmt.Errorf("group file of %s after the start: %w", g, err)
			}
		}
		if segs, _ := filepath.Glob(filepath.Join(jdir, "*.log")); len(segs) != 0 {
			return fmt.Errorf("journal segments left after the files were written: %q", segs)
		}
		return nil
	})
}
