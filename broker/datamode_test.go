package broker_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker"
	"kaas/broker/brokertest"
)

// Every file and directory a broker makes in a new data dir (cluster id, topic catalogue,
// producer ids, partition segments, the offsets journal, group files) is the users' data:
// 0600 and 0700 by default; data.file.mode widens both.
func TestDataDirModes(t *testing.T) {
	for _, c := range []struct {
		name      string
		file, dir fs.FileMode
	}{{"default", 0o600, 0o700}, {"group readable", 0o640, 0o750}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := brokertest.Config(t)
			cfg.DataDir = filepath.Join(cfg.DataDir, "data")
			if c.name != "default" {
				cfg.DataFileMode = c.file
			}
			b := brokertest.StartWith(t, cfg)
			use(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := b.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			var files, dirs int
			err := filepath.WalkDir(cfg.DataDir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				info, err := d.Info()
				if err != nil {
					return err
				}
				want := c.file
				if d.IsDir() {
					want, dirs = c.dir, dirs+1
				} else {
					files++
				}
				if got := info.Mode().Perm(); got != want {
					t.Errorf("%s: mode %o, want %o", path, got, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if files < 5 || dirs < 5 {
				t.Fatalf("only %d files and %d directories made", files, dirs)
			}
		})
	}
}

// use makes the broker write every kind of file: a topic and its segment, a produced
// record (with a producer id), a committed offset.
func use(t *testing.T, b *broker.Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("modes"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "modes"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "modes", Partition: 0, At: 1, LeaderEpoch: -1})
	if r, err := adm.CommitOffsets(ctx, "modes-group", os); err != nil || r.Error() != nil {
		t.Fatalf("commit: %v %v", err, r.Error())
	}
}
