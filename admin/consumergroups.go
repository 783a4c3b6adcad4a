package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Consumer-protocol groups (KIP-848) in `groups describe` and `groups lag`: DescribeGroups
// v6 answers them GROUP_ID_NOT_FOUND (KIP-1043), so they are described again with
// ConsumerGroupDescribe, which gives the group and assignment epochs and each member's
// epoch, assignment and target; their offsets and lag are read as for classic groups.

// consumerDocs describes, as consumer-protocol groups, the groups DescribeGroups did not
// find; it returns the documents of those it found, by group.
func (c *cmd) consumerDocs(ctx context.Context, lags kadm.DescribedGroupLags) map[string]groupDoc {
	var ids []string
	for _, l := range lags {
		if errors.Is(l.DescribeErr, kerr.GroupIDNotFound) {
			ids = append(ids, l.Group)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	described, err := c.adm.DescribeConsumerGroups(ctx, ids...)
	if err != nil && len(described) == 0 {
		return nil // a broker without KIP-848: the classic answer stands
	}
	out := map[string]groupDoc{}
	for _, g := range described {
		if g.Err != nil {
			continue
		}
		out[g.Group] = c.consumerDoc(ctx, g)
	}
	return out
}

// memberState is a consumer-protocol member's reconciliation state as its description
// shows it: left (epoch -2, a static member away), unrevoked_partitions (it still holds
// partitions its target no longer has), unreleased_partitions (its target has partitions
// it does not hold yet), or stable.
func memberState(m kadm.ConsumerGroupMember) string {
	switch {
	case m.MemberEpoch == -2:
		return "left"
	case !subset(m.Assignment, m.TargetAssignment):
		return "unrevoked_partitions"
	case !subset(m.TargetAssignment, m.Assignment):
		return "unreleased_partitions"
	}
	return "stable"
}

func subset(a, b kadm.TopicsSet) bool {
	for t, ps := range a {
		for p := range ps {
			if !b.Lookup(t, p) {
				return false
			}
		}
	}
	return true
}

func topicDocs(s kadm.TopicsSet) []topicDoc {
	out := []topicDoc{}
	for _, t := range s.Sorted() {
		ps := append([]int32(nil), t.Partitions...)
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		out = append(out, topicDoc{t.Topic, ps})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

func (c *cmd) consumerDoc(ctx context.Context, g kadm.DescribedConsumerGroup) groupDoc {
	ge, ae := g.Epoch, g.AssignmentEpoch
	d := groupDoc{Group: g.Group, State: g.State, ProtocolType: "consumer", Protocol: g.AssignorName,
		GroupProtocol: "consumer", GroupEpoch: &ge, AssignmentEpoch: &ae,
		Members: []memberDoc{}, Partitions: []offsetDoc{}}
	if g.Coordinator.Host != "" {
		d.Coordinator = fmt.Sprintf("%s:%d(%d)", g.Coordinator.Host, g.Coordinator.Port, g.Coordinator.NodeID)
	}
	owner := map[string]map[int32]kadm.ConsumerGroupMember{}
	for _, m := range g.Members {
		epoch := m.MemberEpoch
		md := memberDoc{ConsumerID: m.MemberID, Host: m.ClientHost, ClientID: m.ClientID,
			Assignment: topicDocs(m.Assignment), Target: topicDocs(m.TargetAssignment),
			MemberEpoch: &epoch, MemberState: memberState(m), MemberProtocol: "consumer"}
		if m.MemberType == 0 {
			md.MemberProtocol = "classic"
		}
		if m.InstanceID != nil {
			md.InstanceID = *m.InstanceID
		}
		d.Members = append(d.Members, md)
		m.Assignment.Sorted().Each(func(t string, p int32) {
			if owner[t] == nil {
				owner[t] = map[int32]kadm.ConsumerGroupMember{}
			}
			owner[t][p] = m
		})
	}
	committed, err := c.adm.FetchOffsets(ctx, g.Group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		d.Error = errText(err)
		c.fail(g.Group, err)
		return d
	}
	parts := kadm.TopicsSet{}
	for _, m := range g.Members {
		parts.Merge(m.Assignment)
	}
	for t, ps := range committed {
		for p := range ps {
			parts.Add(t, p)
		}
	}
	ends := kadm.ListedOffsets{}
	if topics := parts.Topics(); len(topics) > 0 {
		if ends, err = c.adm.ListEndOffsets(ctx, topics...); err != nil {
			d.Error = errText(err)
			c.fail(g.Group, err)
			return d
		}
	}
	parts.Sorted().Each(func(t string, p int32) {
		od := offsetDoc{Topic: t, Partition: p, LogEndOffset: -1}
		end, ok := ends.Lookup(t, p)
		if ok && end.Err == nil {
			od.LogEndOffset = end.Offset
		}
		if o, ok := committed.Lookup(t, p); ok && o.At >= 0 {
			at := o.At
			od.CurrentOffset = &at
			if od.LogEndOffset >= 0 {
				lag := max(od.LogEndOffset-at, 0)
				od.Lag = &lag
				d.TotalLag += lag
			}
		}
		if m, ok := owner[t][p]; ok {
			od.ConsumerID, od.Host, od.ClientID = m.MemberID, m.ClientHost, m.ClientID
		}
		d.Partitions = append(d.Partitions, od)
	})
	sort.Slice(d.Partitions, func(i, j int) bool {
		a, b := d.Partitions[i], d.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return d
}
