package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"kaas/actors/actor"
	"kaas/actors/group"
	"kaas/actors/offsets"
	"kaas/actors/partition"
	"kaas/cluster"

	"kaas/fence"
	kubefence "kaas/fence/kube"
	"kaas/registry"
	"kaas/registry/kube"
	"kaas/storage"
	"kaas/watchdog"
)

// clusterSide is what a broker of a cluster runs beside its actors: the registry
// source, the assignment watcher, its fence and the ownership controller.
type clusterSide struct {
	fence  fence.Fence
	ctl    *cluster.Controller
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// kubernetes registry: the client and namespace the source and the fence share.
	kube      kubernetes.Interface
	namespace string
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
	if b.cfg.Registry == "kubernetes" {
		return b.startKubeFence()
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

// startWatchdog starts the process that ends this broker's client connections if it
// stops running past its lease (package watchdog). A broker alone has no lease, and one
// whose watchdog cannot start runs without it, saying so.
func (b *Broker) startWatchdog() {
	if b.cluster == nil || !b.cfg.PauseWatchdog {
		return
	}
	w, err := watchdog.Start(watchdog.Config{
		Interval: b.cfg.LeaseRenew / 2,
		// A running broker renews every LeaseRenew; silence for two of them, with the
		// lease ended, is a broker that does not run.
		Stale:    2 * b.cfg.LeaseRenew,
		LeaseEnd: b.cluster.fence.ValidUntil,
		// ValidUntil ends a tenth of the lease early (both fences); a peer looks at the
		// lease every renewal interval.
		Grace: b.cfg.LeaseDuration/10 + b.cfg.LeaseRenew,
		Log:   b.log,
	})
	if err != nil {
		b.log.Error().Err(err).Msg("pause_watchdog_unavailable")
		return
	}
	b.watchdog = w
}

// startKubeFence takes this broker's Lease in the Service's namespace.
func (b *Broker) startKubeFence() error {
	kube.RouteClientLogs(b.log)
	rc, err := kube.RESTConfig(b.cfg.RegistryKubeconfig)
	if err != nil {
		return fmt.Errorf("registry=kubernetes: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("registry=kubernetes: client: %w", err)
	}
	ns, err := kube.Namespace(b.cfg.RegistryNamespace)
	if err != nil {
		return fmt.Errorf("registry=kubernetes: %w", err)
	}
	f, err := kubefence.New(kubefence.Config{
		Client: client, Namespace: ns, Service: b.cfg.RegistryService, Self: b.cfg.NodeID, Size: b.cfg.ClusterSize,
		LeaseDuration: b.cfg.LeaseDuration, RenewInterval: b.cfg.LeaseRenew, Log: b.log,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*b.cfg.LeaseDuration+30*time.Second)
	defer cancel()
	if err := f.Start(ctx); err != nil {
		return fmt.Errorf("registry=kubernetes: take lease: %w", err)
	}
	b.cluster = &clusterSide{fence: f, kube: client, namespace: ns}
	return nil
}

// clusterRegistry is the registry of a cluster, fed by its source.
func (b *Broker) clusterRegistry(self registry.Broker) (*registry.Registry, error) {
	r := registry.New(b.cfg.NodeID, b.cfg.ClusterSize)
	first := b.cfg.Listeners[0].Name
	var src registry.Source
	if b.cfg.Registry == "kubernetes" {
		cfg := kube.Config{Client: b.cluster.kube, Namespace: b.cluster.namespace, Service: b.cfg.RegistryService,
			Size: b.cfg.ClusterSize, Log: b.log, Ports: map[string]int32{}}
		for name, ep := range self.Endpoints {
			cfg.Ports[name] = ep.Port
		}
		if len(b.cfg.RegistryPeers) > 0 {
			// Addresses by ordinal (tests on loopback; a cluster reached through fixed
			// addresses) instead of each pod's DNS name.
			byOrdinal := map[int32]map[string]registry.Endpoint{}
			for _, p := range b.cfg.RegistryPeers {
				byOrdinal[p.ID] = map[string]registry.Endpoint{first: {Host: p.Host, Port: int32(p.Port)}}
			}
			cfg.Mapper = kube.OrdinalMapper(byOrdinal)
		}
		ks, err := kube.New(cfg)
		if err != nil {
			return nil, err
		}
		src = ks
	} else {
		st := &registry.Static{Self: self, Probe: first, Interval: b.cfg.RegistryProbe}
		for _, p := range b.cfg.RegistryPeers {
			st.Peers = append(st.Peers, registry.StaticPeer{ID: p.ID,
				Endpoints: map[string]registry.Endpoint{first: {Host: p.Host, Port: int32(p.Port)}}})
		}
		src = st
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cluster.cancel = cancel
	b.cluster.wg.Add(2)
	go func() {
		defer b.cluster.wg.Done()
		if err := src.Run(ctx, r); err != nil && ctx.Err() == nil {
			b.log.Error().Err(err).Msg("registry_source_stopped")
		}
	}()
	go func() {
		defer b.cluster.wg.Done()
		registry.WatchAssignment(ctx, r, filepath.Join(b.cfg.DataDir, "__cluster", registry.AssignmentFile), time.Second, b.log)
	}()
	return r, nil
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
		Log:   b.log,
		Keys:  b.ownershipKeys,
		Moves: b.met.OwnershipMoves,
		OnApplied: func(st *cluster.State) {
			b.met.RegistryBrokersAlive.Set(float64(len(st.View.Alive)))
			if fence.Valid(c.fence) {
				b.met.LeaseHeld.Set(1)
			} else {
				b.met.LeaseHeld.Set(0)
			}
		},
		Hooks: cluster.Hooks{
			Release: func(ctx context.Context, keep *cluster.State) error {
				if err := b.releaseGroups(ctx, keep); err != nil {
					return err
				}
				if err := b.releaseTxns(ctx, keep); err != nil {
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
				if err := b.rebalancePartitions(ctx, st); err != nil {
					return err
				}
				return b.adoptTxns(st)
			},
		},
	})
	b.env.Ownership = c.ctl.State
	c.ctl.Start()
}

// ownershipKeys are the keys ownership moves are counted over: the groups with an
// offsets file and the partitions of the catalogue's topics.
func (b *Broker) ownershipKeys() cluster.Keys {
	var k cluster.Keys
	k.Groups, _ = offsets.ListGroupIDs(storage.OSFS{}, offsets.Dir(b.cfg.DataDir))
	if b.env.Catalog == nil {
		return k
	}
	// <data.dir>/topics/<topic>/ (actors/partition); a name the catalogue does not know
	// (a deleted topic not yet removed) has no partitions.
	names, _ := storage.OSFS{}.ReadDirNames(filepath.Join(b.cfg.DataDir, "topics"))
	for _, name := range names {
		n, ok := b.env.Catalog.Partitions(name)
		for p := int32(0); ok && p < n; p++ {
			k.Partitions = append(k.Partitions, cluster.Partition{Topic: name, Partition: p})
		}
	}
	return k
}

// releaseGroups stops the group actors keep does not serve (nil: every one) and waits
// for them.
func (b *Broker) releaseGroups(ctx context.Context, keep *cluster.State) error {
	if b.env.Groups == nil {
		return nil
	}
	done := make(chan struct{})
	p := actor.PromiseFunc(func(any) { close(done) })
	keepFn := func(string) bool { return false }
	if keep != nil {
		keepFn = keep.OwnsGroup
	}
	b.sys.Send(b.env.Groups, &group.Release{Keep: keepFn, Reply: p})
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
		Leader: func(topic string, p int32) (int32, int32) {
			st := state()
			if st == nil {
				return -1, -1
			}
			leader := st.PartitionLeader(topic, p)
			if leader >= 0 && leader != b.cfg.NodeID && !b.env.Registry.Reachable(leader) {
				// Its connection just ended (killed?), or the registry has seen it gone
				// before the view has: no leader for the moments until the view moves
				// it (Metadata lists only the brokers the registry has alive, and a
				// client takes a leader missing from that list for no leader anyway).
				leader = -1
			}
			return leader, st.PartitionReplica(topic, p)
		},
		Catalogue: func() bool { return state().OwnsCatalogue() },
		Gate:      b.gate,
		Lapsed:    b.cluster.fence.Lapsed,
		Reload:    time.Second,
		Size:      b.cfg.ClusterSize,
	}
}

// dropTombstones, in a cluster, removes the tombstones older than the retention sweep's
// bound of the deleted groups this broker serves (single broker: nil, none are written).
func (b *Broker) dropTombstones(fsys storage.FS, dir string) func(time.Time) (int, error) {
	owns := b.owns()
	if owns == nil {
		return nil
	}
	return func(before time.Time) (int, error) { return offsets.DropTombstones(fsys, dir, before, owns) }
}

// owns is the groups manager's Owns in a cluster: whether this broker coordinates a
// group in the ownership controller's state in force (nil: a broker alone).
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
	if b.cluster == nil {
		return nil
	}
	c := b.cluster
	term := c.fence.Term()
	return func() bool {
		return c.fence.Term() == term && fence.Valid(c.fence)
	}
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
