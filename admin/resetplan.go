package admin

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// resetDoc is one partition of a reset: its offset before and the one set (or to be set).
type resetDoc struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	CurrentOffset *int64 `json:"current_offset"`
	NewOffset     int64  `json:"new_offset"`
	Error         string `json:"error,omitempty"`
}

// resetMode is how reset-offsets picks each partition's new offset.
type resetMode struct {
	name     string
	offset   int64 // --to-offset, --shift-by
	datetime int64 // --to-datetime, in Unix milliseconds
}

// checkInactive refuses a reset of a group with members, as kafka-consumer-groups does:
// its consumers would overwrite the new offsets with their next commit.
func (c *cmd) checkInactive(group string) error {
	ctx, cancel := c.context()
	defer cancel()
	described, err := c.adm.DescribeGroups(ctx, group)
	if err != nil {
		var se *kadm.ShardErrors
		if !errors.As(err, &se) {
			return err
		}
	}
	d, ok := described[group]
	switch {
	case ok && errors.Is(d.Err, kerr.GroupIDNotFound):
		return nil // a group that does not exist yet: the reset creates its offsets
	case !ok:
		return fmt.Errorf("describe group %s: no answer: %w", group, err)
	case d.Err != nil:
		return fmt.Errorf("describe group %s: %w", group, d.Err)
	case d.State != "Empty" && d.State != "Dead":
		return fmt.Errorf("group %s is %s with %d members: offsets can be reset only when it has none; stop its consumers first",
			group, d.State, len(d.Members))
	}
	return nil
}

// planReset works out each partition's new offset. A partition whose new offset cannot be
// known carries its error.
func (c *cmd) planReset(group string, topics []topicArg, mode resetMode) ([]resetDoc, error) {
	ctx, cancel := c.context()
	defer cancel()
	current, err := c.adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	if err := current.Error(); err != nil {
		return nil, fmt.Errorf("fetch committed offsets: %w", err)
	}
	set := kadm.TopicsSet{}
	if topics == nil { // --all-topics: every topic the group has committed offsets for
		current.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				set.Add(o.Topic, o.Partition)
			}
		})
		if len(set) == 0 {
			return nil, fmt.Errorf("group %s has no committed offsets", group)
		}
	} else {
		names := make([]string, 0, len(topics))
		for _, t := range topics {
			names = append(names, t.topic)
		}
		details, err := c.adm.ListTopics(ctx, names...)
		if err != nil {
			return nil, err
		}
		for _, t := range topics {
			d, ok := details[t.topic]
			if !ok || d.Err != nil {
				why := error(kerr.UnknownTopicOrPartition)
				if ok {
					why = d.Err
				}
				return nil, fmt.Errorf("topic %s: %w", t.topic, why)
			}
			if t.partitions == nil {
				set.Add(t.topic, d.Partitions.Numbers()...)
				continue
			}
			for _, p := range t.partitions {
				if _, ok := d.Partitions[p]; !ok {
					return nil, fmt.Errorf("topic %s has no partition %d", t.topic, p)
				}
			}
			set.Add(t.topic, t.partitions...)
		}
	}
	names := set.Topics()
	starts, err := c.adm.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, err
	}
	ends, err := c.adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, err
	}
	var at kadm.ListedOffsets
	if mode.name == "to-datetime" {
		if at, err = c.adm.ListOffsetsAfterMilli(ctx, mode.datetime, names...); err != nil {
			return nil, err
		}
	}
	var out []resetDoc
	for _, tp := range set.Sorted() {
		for _, p := range tp.Partitions {
			r := resetDoc{Topic: tp.Topic, Partition: p}
			cur, hasCur := current.Lookup(tp.Topic, p)
			if hasCur && cur.At >= 0 {
				v := cur.At
				r.CurrentOffset = &v
			}
			start, _ := starts.Lookup(tp.Topic, p)
			end, _ := ends.Lookup(tp.Topic, p)
			if err := firstErr(start.Err, end.Err); err != nil {
				r.Error = errText(err)
				out = append(out, r)
				continue
			}
			clamp := func(o int64) int64 { return max(start.Offset, min(o, end.Offset)) }
			switch mode.name {
			case "to-earliest":
				r.NewOffset = start.Offset
			case "to-latest":
				r.NewOffset = end.Offset
			case "to-offset":
				r.NewOffset = clamp(mode.offset)
			case "shift-by":
				if r.CurrentOffset == nil {
					r.Error = "no committed offset to shift"
					break
				}
				next := *r.CurrentOffset + mode.offset
				if mode.offset > 0 && next < *r.CurrentOffset { // overflow
					next = math.MaxInt64
				}
				r.NewOffset = clamp(next)
			case "to-datetime":
				o, ok := at.Lookup(tp.Topic, p)
				switch {
				case !ok:
					r.Error = "no offset listed for the time"
				case o.Err != nil:
					r.Error = errText(o.Err)
				case o.Offset < 0: // no record at or after the time (Apache: the log end)
					r.NewOffset = end.Offset
				default:
					r.NewOffset = clamp(o.Offset)
				}
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// parseDatetime reads --to-datetime: RFC 3339 with its zone, or Apache's
// YYYY-MM-DDTHH:mm:SS[.sss] in local time, or Unix milliseconds.
func parseDatetime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms >= 0 {
		return ms, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMilli(), nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05.000", "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, fmt.Errorf("--to-datetime %q: want RFC 3339 (2024-05-01T12:00:00Z), YYYY-MM-DDTHH:mm:SS[.sss] or Unix milliseconds", bounded(s))
}
