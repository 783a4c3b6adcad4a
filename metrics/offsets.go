package metrics

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Offsets is what consumer lag is made of, as this broker knows it: the log end offset
// of each partition it leads (published by the partition actors) and the committed
// offsets of each group it coordinates (published by the offsets actors). A scrape turns
// them into kaas_log_end_offset, kaas_group_committed_offset and, where the broker has
// both, kaas_group_lag. Entries live as long as their actor: a group or partition this
// broker no longer holds (passivated, unloaded, moved to another broker) has no series,
// so the label sets stay bounded by what the broker serves.
//
// A nil *Offsets, and the nil handles it gives, record nothing.
type Offsets struct {
	mu     sync.RWMutex
	ends   map[TopicPartition]*LogEnd
	groups map[string]*GroupOffsets

	endDesc, committedDesc, lagDesc *prometheus.Desc
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// NewOffsets makes the store and registers its collector on reg (nil: not registered).
func NewOffsets(reg prometheus.Registerer) *Offsets {
	o := &Offsets{
		ends:   map[TopicPartition]*LogEnd{},
		groups: map[string]*GroupOffsets{},
		endDesc: prometheus.NewDesc("kaas_log_end_offset",
			"Offset after the last record consumers may read (the high watermark) of each partition this broker leads.",
			[]string{"topic", "partition"}, nil),
		committedDesc: prometheus.NewDesc("kaas_group_committed_offset",
			"Committed offset of each partition of each group this broker coordinates (loaded groups only).",
			[]string{"group", "topic", "partition"}, nil),
		lagDesc: prometheus.NewDesc("kaas_group_lag",
			"Log end offset minus committed offset, for the groups this broker coordinates and the partitions it also leads (elsewhere: kaas_log_end_offset of the leader minus kaas_group_committed_offset).",
			[]string{"group", "topic", "partition"}, nil),
	}
	if reg != nil {
		reg.MustRegister(o)
	}
	return o
}

// LogEnd is one partition's published log end offset.
type LogEnd struct {
	o   *Offsets
	tp  TopicPartition
	end atomic.Int64
}

// LogEnd registers the partition's log end, replacing an earlier incarnation's.
func (o *Offsets) LogEnd(topic string, partition int32) *LogEnd {
	if o == nil {
		return nil
	}
	e := &LogEnd{o: o, tp: TopicPartition{topic, partition}}
	e.end.Store(-1)
	o.mu.Lock()
	o.ends[e.tp] = e
	o.mu.Unlock()
	return e
}

// Set publishes the offset (cheap: an atomic store).
func (e *LogEnd) Set(end int64) {
	if e != nil {
		e.end.Store(end)
	}
}

// Remove withdraws the partition, unless a newer incarnation has registered since.
func (e *LogEnd) Remove() {
	if e == nil {
		return
	}
	e.o.mu.Lock()
	if e.o.ends[e.tp] == e {
		delete(e.o.ends, e.tp)
	}
	e.o.mu.Unlock()
}

// GroupOffsets is one group's published committed offsets.
type GroupOffsets struct {
	o     *Offsets
	group string
	mu    sync.Mutex
	// A group's offsets are in few while they are at most fewOffsets (a slice is a
	// third of a map's bytes for a handful of partitions), in many beyond.
	few  []committedAt
	many map[TopicPartition]int64
}

// fewOffsets is how many offsets a group keeps in a slice before a map.
const fewOffsets = 16

type committedAt struct {
	tp     TopicPartition
	offset int64
}

// Group registers the group's committed offsets, replacing an earlier incarnation's.
func (o *Offsets) Group(group string) *GroupOffsets {
	if o == nil {
		return nil
	}
	g := &GroupOffsets{o: o, group: group}
	o.mu.Lock()
	o.groups[group] = g
	o.mu.Unlock()
	return g
}

// Set publishes one partition's committed offset.
func (g *GroupOffsets) Set(topic string, partition int32, offset int64) {
	if g == nil {
		return
	}
	tp := TopicPartition{topic, partition}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.many != nil {
		g.many[tp] = offset
		return
	}
	for i := range g.few {
		if g.few[i].tp == tp {
			g.few[i].offset = offset
			return
		}
	}
	if len(g.few) < fewOffsets {
		g.few = append(g.few, committedAt{tp, offset})
		return
	}
	g.many = make(map[TopicPartition]int64, 2*fewOffsets)
	for _, c := range g.few {
		g.many[c.tp] = c.offset
	}
	g.many[tp] = offset
	g.few = nil
}

// Delete withdraws one partition's committed offset.
func (g *GroupOffsets) Delete(topic string, partition int32) {
	if g == nil {
		return
	}
	tp := TopicPartition{topic, partition}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.many != nil {
		delete(g.many, tp)
		return
	}
	for i := range g.few {
		if g.few[i].tp == tp {
			last := len(g.few) - 1
			g.few[i] = g.few[last]
			g.few = g.few[:last]
			return
		}
	}
}

// Replace publishes exactly these offsets (a load, or a state replaced whole).
func (g *GroupOffsets) Replace(offsets map[TopicPartition]int64) {
	if g == nil {
		return
	}
	var few []committedAt
	if len(offsets) <= fewOffsets {
		few = make([]committedAt, 0, len(offsets))
		for tp, v := range offsets {
			few = append(few, committedAt{tp, v})
		}
		offsets = nil
	}
	g.mu.Lock()
	g.few, g.many = few, offsets
	g.mu.Unlock()
}

// Remove withdraws the group, unless a newer incarnation has registered since.
func (g *GroupOffsets) Remove() {
	if g == nil {
		return
	}
	g.o.mu.Lock()
	if g.o.groups[g.group] == g {
		delete(g.o.groups, g.group)
	}
	g.o.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (o *Offsets) Describe(ch chan<- *prometheus.Desc) {
	ch <- o.endDesc
	ch <- o.committedDesc
	ch <- o.lagDesc
}

// Collect implements prometheus.Collector.
func (o *Offsets) Collect(ch chan<- prometheus.Metric) {
	o.mu.RLock()
	ends := make(map[TopicPartition]int64, len(o.ends))
	for tp, e := range o.ends {
		if v := e.end.Load(); v >= 0 {
			ends[tp] = v
		}
	}
	groups := make([]*GroupOffsets, 0, len(o.groups))
	for _, g := range o.groups {
		groups = append(groups, g)
	}
	o.mu.RUnlock()
	for tp, end := range ends {
		ch <- prometheus.MustNewConstMetric(o.endDesc, prometheus.GaugeValue, float64(end), tp.Topic, strconv.Itoa(int(tp.Partition)))
	}
	for _, g := range groups {
		// Copied, so an actor publishing a commit never waits for the scrape.
		g.mu.Lock()
		at := make(map[TopicPartition]int64, len(g.few)+len(g.many))
		for _, c := range g.few {
			at[c.tp] = c.offset
		}
		for tp, v := range g.many {
			at[tp] = v
		}
		g.mu.Unlock()
		for tp, at := range at {
			p := strconv.Itoa(int(tp.Partition))
			ch <- prometheus.MustNewConstMetric(o.committedDesc, prometheus.GaugeValue, float64(at), g.group, tp.Topic, p)
			if end, ok := ends[tp]; ok && at >= 0 {
				ch <- prometheus.MustNewConstMetric(o.lagDesc, prometheus.GaugeValue, float64(max(end-at, 0)), g.group, tp.Topic, p)
			}
		}
	}
}
