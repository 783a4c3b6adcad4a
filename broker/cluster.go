package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"kaas/actors/actor"
	"kaas/actors/group"
	"kaas/actors/offsets"
	"kaas/actors/partition"
	"kaas/cluster"
	"kaas/fence"
	"kaas/registry"
	"kaas/storage"
)

// clusterSide is what a broker of a static registry runs beside its actors: the
// registry source, the assignment watcher, its fence and the ownership controller.
type clusterSide struct {
	fence  fence.Fence
	ctl    *cluster.Controller
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startFence takes this broker's lease before anything under data.dir is written.
func (b *Broker) startFence() error {
	if b.cfg.Registry == "dev" {
		return nil
	}
	var peers []int32
	for id := int32(0); int(id) < b.cfg.ClusterSize; id++ {
		peers = append(peers, id)
	}
	f := fence.NewFile(fence.FileConfig{
		Dir: filepath.Join(b.cfg.DataDir, "__cluster", "nodes"), Self: b.cfg.NodeID, Peers: peers,
		Duration: b.cfg.LeaseDuration, Renew: b.cfg.LeaseRenew, Log: b.log,
	})
	if err := f.Start(context.Background()); err != nil {
		return err
	}
	b.cluster = &clusterSide{fence: f}
	return nil
}

// clusterRegistry is the registry of a static cluster, fed by its source.
func (b *Broker) clusterRegistry(self registry.Broker) *registry.Registry {
	r := registry.New(b.cfg.NodeID, b.cfg.ClusterSize)
	first := b.cfg.Listeners[0].Name
	src := &registry.Static{Self: self, Probe: first, Interval: b.cfg.RegistryProbe}
	for _, p := range b.cfg.RegistryPeers {
		src.Peers = append(src.Peers, registry.StaticPeer{ID: p.ID,
			Endpoints: map[string]registry.Endpoint{first: {Host: p.Host, Port: int32(p.Port)}}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cluster.cancel = cancel
	b.cluster.wg.Add(2)
	go func() { defer b.cluster.wg.Done(); _ = src.Run(ctx, r) }()
	go func() {
		defer b.cluster.wg.Done()
		registry.WatchAssignment(ctx, r, filepath.Join(b.cfg.DataDir, "__cluster", registry.AssignmentFile), time.Second, b.log)
	}()
	return r
}

// startController starts the ownership controller once the managers run.
func (b *Broker) startController() {
	c := b.cluster
	var peerJournals []string
	for id := int32(0); int(id) < b.cfg.ClusterSize; id++ {
		if id != b.cfg.NodeID {
			peerJournals = append(peerJournals, offsets.JournalDir(b.cfg.DataDir, id))
		}
	}
	c.ctl = cluster.New(cluster.Config{
		Registry: b.env.Registry, Fence: c.fence, Dir: filepath.Join(b.cfg.DataDir, "__cluster", "nodes"),
		Log: b.log,
		Hooks: cluster.Hooks{
			Release: func(ctx context.Context, keep *cluster.State) error {
				if err := b.releaseGroups(ctx, keep); err != nil {
					return err
				}
				return b.rebalancePartitions(ctx, keep)
			},
			Adopt: func(st *cluster.State) error {
				n, err := offsets.Adopt(offsets.AdoptConfig{
					FS: storage.OSFS{}, OffsetsDir: offsets.Dir(b.cfg.DataDir), JournalDirs: peerJournals,
					Owns: st.OwnsGroup, Log: b.log,
				})
				if n > 0 {
					b.log.Info().Int("groups", n).Msg("groups_adopted")
				}
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return b.rebalancePartitions(ctx, st)
			},
		},
	})
	b.env.Ownership = c.ctl.State
	c.ctl.Start()
}

// releaseGroups stops the group actors keep does not serve and waits for them.
func (b *Broker) releaseGroups(ctx context.Context, keep *cluster.State) error {
	if b.env.Groups == nil {
		return nil
	}
	done := make(chan struct{})
	p := actor.PromiseFunc(func(any) { close(done) })
	b.sys.Send(b.env.Groups, &group.Release{Keep: keep.OwnsGroup, Reply: p})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("release groups: %w", ctx.Err())
	}
}

// rebalancePartitions has the topics manager lead exactly what st gives this broker.
func (b *Broker) rebalancePartitions(ctx context.Context, st *cluster.State) error {
	if b.env.Topics == nil {
		return nil
	}
	done := make(chan struct{})
	p := actor.PromiseFunc(func(any) { close(done) })
	b.sys.Send(b.env.Topics, &partition.Rebalance{Owns: st.OwnsPartition, Reply: p})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rebalance partitions: %w", ctx.Err())
	}
}

// topicsCluster is the topics manager's view of the cluster (nil: a broker alone).
func (b *Broker) topicsCluster() *partition.ClusterConfig {
	if b.cluster == nil {
		return nil
	}
	state := func() *cluster.State {
		if b.cluster.ctl == nil {
			return nil
		}
		return b.cluster.ctl.State()
	}
	return &partition.ClusterConfig{
		Owns: func(topic string, p int32) bool { return state().OwnsPartition(topic, p) },
		Leader: func(topic string, p int32) int32 {
			id, st := state().Partition(topic, p)
			if st == cluster.Unavailable {
				return -1
			}
			return id
		},
		Catalogue: func() bool { return state().OwnsCatalogue() },
		Reload:    time.Second,
		Size:      b.cfg.ClusterSize,
	}
}

// owns is the groups manager's Owns in a cluster (nil: a broker alone).
func (b *Broker) owns() func(string) bool {
	if b.cluster == nil {
		return nil
	}
	return func(g string) bool {
		if b.cluster.ctl == nil {
			return false
		}
		return b.cluster.ctl.State().OwnsGroup(g)
	}
}

// gate is an offsets actor's Gate in a cluster: writes loaded now may be acknowledged
// while the lease taken at this term lasts.
func (b *Broker) gate() func() bool {
	if b.cluster == nil || b.cluster.ctl == nil {
		return nil
	}
	ctl := b.cluster.ctl
	st := ctl.State()
	if st == nil {
		return func() bool { return false }
	}
	term := st.Term
	return func() bool { return ctl.Gate(term) }
}

func (c *clusterSide) stop() {
	if c == nil {
		return
	}
	if c.ctl != nil {
		c.ctl.Stop()
	}
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.fence.Stop()
}
