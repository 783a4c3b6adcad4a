package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	kproc "kaas/e2e/proc"
)

// TestProbe runs `groups probe` twice against each cluster and checks with a client of
// its own that each run produced a new record and committed past it in the group.
func TestProbe(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			addr := c.start(t)
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			adm := kadm.NewClient(cl)
			for run := int64(0); run < 2; run++ {
				r := on(addr, "groups", "probe", "--topic", "probe-t", "--group", "probe-g", "--json").must(t, 0)
				var doc probeDoc
				if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
					t.Fatalf("run %d: %v\n%s", run, err, r.stdout)
				}
				if doc.Partition != 0 || doc.Offset != run || doc.Committed != run+1 || doc.Generation < 1 {
					t.Fatalf("run %d: %+v, want partition 0, offset %d, committed %d, a generation", run, doc, run, run+1)
				}
				var steps []string
				for _, s := range doc.Steps {
					steps = append(steps, s.Step)
				}
				if got := strings.Join(steps, ","); got != "topic,produce,join,fetch,commit,offset-fetch" {
					t.Fatalf("run %d: steps %s", run, got)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				offs, err := adm.FetchOffsets(ctx, "probe-g")
				end, eerr := adm.ListEndOffsets(ctx, "probe-t")
				cancel()
				if err != nil || eerr != nil {
					t.Fatalf("run %d: fetch offsets: %v, end offsets: %v", run, err, eerr)
				}
				o, ok := offs.Lookup("probe-t", 0)
				e, eok := end.Lookup("probe-t", 0)
				if !ok || o.At != run+1 || !eok || e.Offset != run+1 {
					t.Fatalf("run %d: committed %+v, log end %+v; want both %d", run, o, e, run+1)
				}
			}
			r := on(addr, "groups", "probe").must(t, 0)
			if find(rows(t, r.stdout), "STEP", "offset-fetch") == nil {
				t.Fatalf("probe table lacks the offset-fetch step:\n%s", r.stdout)
			}
		})
	}
}

func TestProbeUnreachableExitsOne(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", kproc.FreePort(t))
	r := run("groups", "probe", "--bootstrap-server", addr, "--timeout", "2s")
	if r.code != 1 || !strings.Contains(r.stderr, "kaas: groups probe: ") || !strings.Contains(r.stderr, addr) {
		t.Fatalf("exit %d, stderr %q; want 1 naming %s", r.code, r.stderr, addr)
	}
	if r := run("groups", "probe", "--group", ""); r.code != 2 {
		t.Fatalf("empty --group: exit %d, want 2", r.code)
	}
}
