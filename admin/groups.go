package admin

import (
	"errors"
	"flag"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

var groupVerbs = []verb{
	{"list", "list the consumer groups and their states", listGroups},
	{"describe", "a group's committed offsets, log end offsets and lag per partition (--members, --state)", describeGroups},
	{"lag", "the lag of some groups (--group) or all, per partition", lagGroups},
	{"reset-offsets", "set a group's committed offsets (dry run unless --execute; the group must have no members)", resetOffsets},
	{"delete-offsets", "delete a group's committed offsets for some topics or partitions", deleteOffsets},
	{"delete", "delete groups that have no members, with their committed offsets", deleteGroups},
	{"probe", "produce a record, join a group, fetch and commit the record, read the commit back", probeGroup},
}

type listedGroupDoc struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	Coordinator  int32  `json:"coordinator"`
	// Type is classic or consumer (KIP-848; ListGroups v5), "" from an older broker.
	Type string `json:"type"`
}

func listGroups(fs *flag.FlagSet) action {
	var states stringList
	fs.Var(&states, "state", "only groups in this `state` (Empty, Stable, PreparingRebalance, CompletingRebalance, Dead; a consumer-protocol group's Assigning, Reconciling); repeatable")
	return action{run: func(c *cmd) error {
		ctx, cancel := c.context()
		defer cancel()
		listed, err := c.adm.ListGroups(ctx, states...)
		if err != nil {
			return err
		}
		doc := struct {
			Groups []listedGroupDoc `json:"groups"`
		}{Groups: []listedGroupDoc{}}
		for _, g := range listed.Sorted() {
			doc.Groups = append(doc.Groups, listedGroupDoc{g.Group, g.State, g.ProtocolType, g.Coordinator, g.GroupType})
		}
		if c.json {
			return c.document(doc)
		}
		var rows [][]string
		for _, g := range doc.Groups {
			rows = append(rows, []string{g.Group, dash(g.State), dash(g.ProtocolType), dash(g.Type)})
		}
		c.table([]string{"GROUP", "STATE", "PROTOCOL-TYPE", "TYPE"}, rows)
		return nil
	}}
}

// groupDoc is one group as describe and lag print it in JSON.
type groupDoc struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	Protocol     string `json:"protocol"`
	// GroupProtocol is classic or consumer (KIP-848); a consumer-protocol group has its
	// group and target assignment epochs.
	GroupProtocol   string        `json:"group_protocol"`
	GroupEpoch      *int32        `json:"group_epoch,omitempty"`
	AssignmentEpoch *int32        `json:"assignment_epoch,omitempty"`
	Coordinator     string        `json:"coordinator"`
	Members         []memberDoc   `json:"members"`
	Partitions      []offsetDoc   `json:"partitions"`
	TotalLag        int64         `json:"total_lag"`
	Error           string        `json:"error,omitempty"`
	lag             kadm.GroupLag // for the text tables
}

type memberDoc struct {
	ConsumerID string     `json:"consumer_id"`
	InstanceID string     `json:"instance_id,omitempty"`
	Host       string     `json:"host"`
	ClientID   string     `json:"client_id"`
	Assignment []topicDoc `json:"assignment"`
	// A consumer-protocol member's epoch, state and target assignment.
	MemberEpoch *int32 `json:"member_epoch,omitempty"`
	MemberState string `json:"member_state,omitempty"`
	// MemberProtocol: classic or consumer, the protocol a member of a consumer-protocol
	// group speaks (a classic member of a group being migrated, KIP-1099).
	MemberProtocol string     `json:"member_protocol,omitempty"`
	Target         []topicDoc `json:"target_assignment,omitempty"`
}

type topicDoc struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// offsetDoc is one partition of a group: current_offset and lag are null where the
// group has committed nothing (Apache prints "-").
type offsetDoc struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	CurrentOffset *int64 `json:"current_offset"`
	LogEndOffset  int64  `json:"log_end_offset"`
	Lag           *int64 `json:"lag"`
	ConsumerID    string `json:"consumer_id,omitempty"`
	Host          string `json:"host,omitempty"`
	ClientID      string `json:"client_id,omitempty"`
	Error         string `json:"error,omitempty"`
}

var offsetHeader = []string{"GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"}

func describeGroups(fs *flag.FlagSet) action {
	var groups stringList
	var all, members, state bool
	fs.Var(&groups, "group", "the `group` to describe; repeatable")
	fs.BoolVar(&all, "all-groups", false, "describe every group")
	fs.BoolVar(&members, "members", false, "print the members instead of the offsets")
	fs.BoolVar(&state, "state", false, "print the group's state instead of the offsets")
	return action{
		check: func() error {
			switch {
			case len(groups) == 0 && !all:
				return errors.New("want --group or --all-groups")
			case len(groups) > 0 && all:
				return errors.New("--group and --all-groups exclude each other")
			case members && state:
				return errors.New("--members and --state exclude each other")
			}
			return nil
		},
		run: func(c *cmd) error {
			return c.showGroups(groups, func(docs []groupDoc) {
				describeTable(c, docs, members, state)
			})
		},
	}
}

// describeTable prints describe's table: members, state, or offsets.
func describeTable(c *cmd, docs []groupDoc, members, state bool) {
	switch {
	case members:
		var rows [][]string
		for _, g := range docs {
			for _, m := range g.Members {
				n := 0
				for _, t := range m.Assignment {
					n += len(t.Partitions)
				}
				epoch, assigned, target := "-", "-", "-"
				if m.MemberEpoch != nil {
					epoch, assigned, target = itoa(*m.MemberEpoch), partitionsText(m.Assignment), partitionsText(m.Target)
				}
				rows = append(rows, []string{g.Group, m.ConsumerID, dash(m.Host), dash(m.ClientID), itoa(n),
					epoch, dash(m.MemberState), assigned, target})
			}
		}
		c.table([]string{"GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "MEMBER-STATE",
			"ASSIGNMENT", "TARGET-ASSIGNMENT"}, rows)
	case state:
		var rows [][]string
		for _, g := range docs {
			epoch, target := "-", "-"
			if g.GroupEpoch != nil {
				epoch, target = itoa(*g.GroupEpoch), itoa(*g.AssignmentEpoch)
			}
			rows = append(rows, []string{g.Group, dash(g.Coordinator), dash(g.Protocol), dash(g.State), itoa(len(g.Members)),
				dash(g.GroupProtocol), epoch, target})
		}
		c.table([]string{"GROUP", "COORDINATOR", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS", "GROUP-PROTOCOL",
			"GROUP-EPOCH", "ASSIGNMENT-EPOCH"}, rows)
	default:
		c.offsetTable(docs)
	}
}

// showGroups looks the groups up (every group when none is named) and prints them as one
// JSON document or through table.
func (c *cmd) showGroups(groups []string, table func([]groupDoc)) error {
	docs, err := c.groupLags(groups)
	if err != nil {
		return err
	}
	if c.json {
		return c.document(struct {
			Groups []groupDoc `json:"groups"`
		}{docs})
	}
	table(docs)
	return nil
}

func lagGroups(fs *flag.FlagSet) action {
	var groups stringList
	fs.Var(&groups, "group", "the `group` to show; repeatable (default every group)")
	return action{run: func(c *cmd) error { return c.showGroups(groups, c.offsetTable) }}
}

func (c *cmd) offsetTable(docs []groupDoc) {
	var rows [][]string
	for _, g := range docs {
		for _, p := range g.Partitions {
			cur, lag := "-", "-"
			if p.CurrentOffset != nil {
				cur = itoa(*p.CurrentOffset)
			}
			if p.Lag != nil {
				lag = itoa(*p.Lag)
			}
			end := itoa(p.LogEndOffset)
			if p.LogEndOffset < 0 {
				end = "-"
			}
			rows = append(rows, []string{g.Group, p.Topic, itoa(p.Partition), cur, end, lag, dash(p.ConsumerID), dash(p.Host), dash(p.ClientID)})
		}
	}
	c.table(offsetHeader, rows)
}

// groupLags describes groups (every group when none is named) with their lag. A group
// that cannot be described, does not exist, or has a partition whose lag is unknown is
// reported and fails the command; the others are still returned.
func (c *cmd) groupLags(groups []string) ([]groupDoc, error) {
	ctx, cancel := c.context()
	defer cancel()
	lags, err := c.adm.Lag(ctx, groups...)
	if err != nil {
		return nil, err
	}
	docs := []groupDoc{}
	consumer := c.consumerDocs(ctx, lags)
	for _, l := range lags.Sorted() {
		if d, ok := consumer[l.Group]; ok {
			docs = append(docs, d)
			continue
		}
		d := groupDoc{Group: l.Group, State: l.State, ProtocolType: l.ProtocolType, Protocol: l.Protocol,
			GroupProtocol: "classic", Members: []memberDoc{}, Partitions: []offsetDoc{}, lag: l.Lag}
		if l.Coordinator.Host != "" {
			d.Coordinator = fmt.Sprintf("%s:%d(%d)", l.Coordinator.Host, l.Coordinator.Port, l.Coordinator.NodeID)
		}
		if err := l.Error(); err != nil {
			d.Error = errText(err)
			c.fail(l.Group, err)
			docs = append(docs, d)
			continue
		}
		for _, m := range l.Members {
			md := memberDoc{ConsumerID: m.MemberID, Host: m.ClientHost, ClientID: m.ClientID, Assignment: []topicDoc{}}
			if m.InstanceID != nil {
				md.InstanceID = *m.InstanceID
			}
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					md.Assignment = append(md.Assignment, topicDoc{t.Topic, t.Partitions})
				}
			}
			d.Members = append(d.Members, md)
		}
		for _, p := range l.Lag.Sorted() {
			od := offsetDoc{Topic: p.Topic, Partition: p.Partition, LogEndOffset: p.End.Offset}
			if p.End.Err != nil {
				od.LogEndOffset = -1
			}
			if p.Commit.At >= 0 {
				at := p.Commit.At
				od.CurrentOffset = &at
				if p.Err == nil {
					lag := p.Lag
					od.Lag = &lag
					d.TotalLag += lag
				}
			}
			if p.Member != nil {
				od.ConsumerID, od.Host, od.ClientID = p.Member.MemberID, p.Member.ClientHost, p.Member.ClientID
			}
			if p.Err != nil {
				od.Error = errText(p.Err)
				c.fail(fmt.Sprintf("%s %s/%d", l.Group, p.Topic, p.Partition), p.Err)
			}
			d.Partitions = append(d.Partitions, od)
		}
		if len(groups) > 0 && l.State == "Dead" && len(d.Partitions) == 0 {
			d.Error = "the group does not exist"
			c.fail(l.Group, errors.New(d.Error))
		}
		docs = append(docs, d)
	}
	return docs, nil
}

func resetOffsets(fs *flag.FlagSet) action {
	var (
		group             string
		topics            stringList
		allTopics         bool
		earliest, latest  bool
		toOffset, shiftBy int64
		datetime          string
		execute, dryRun   bool
		mode              resetMode
		parsed            []topicArg
	)
	fs.StringVar(&group, "group", "", "the `group` whose offsets are reset")
	fs.Var(&topics, "topic", "a `topic`, or topic:partition,partition; repeatable")
	fs.BoolVar(&allTopics, "all-topics", false, "every topic the group has committed offsets for")
	fs.BoolVar(&earliest, "to-earliest", false, "reset to each partition's log start offset")
	fs.BoolVar(&latest, "to-latest", false, "reset to each partition's log end offset")
	fs.Int64Var(&toOffset, "to-offset", 0, "reset to this `offset` (kept within the log's start and end)")
	fs.Int64Var(&shiftBy, "shift-by", 0, "move each committed offset by `n` (negative: back; kept within the log)")
	fs.StringVar(&datetime, "to-datetime", "", "reset to the first offset at or after this `time` (RFC 3339, or YYYY-MM-DDTHH:mm:SS[.sss] local)")
	fs.BoolVar(&execute, "execute", false, "commit the new offsets (without it nothing changes)")
	fs.BoolVar(&dryRun, "dry-run", false, "only print the new offsets (the default)")
	return action{
		check: func() error {
			fs.Visit(func(f *flag.Flag) {
				switch f.Name {
				case "to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime":
					if mode.name != "" {
						mode.name = "twice"
						return
					}
					mode.name = f.Name
				}
			})
			switch {
			case group == "":
				return errors.New("want --group")
			case mode.name == "":
				return errors.New("want one of --to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime")
			case mode.name == "twice":
				return errors.New("--to-earliest, --to-latest, --to-offset, --shift-by and --to-datetime exclude each other")
			case len(topics) == 0 && !allTopics:
				return errors.New("want --topic or --all-topics")
			case len(topics) > 0 && allTopics:
				return errors.New("--topic and --all-topics exclude each other")
			case execute && dryRun:
				return errors.New("--execute and --dry-run exclude each other")
			}
			switch mode.name {
			case "to-offset":
				if toOffset < 0 {
					return fmt.Errorf("--to-offset %d: want an offset of 0 or more", toOffset)
				}
				mode.offset = toOffset
			case "shift-by":
				mode.offset = shiftBy
			case "to-datetime":
				ms, err := parseDatetime(datetime)
				if err != nil {
					return err
				}
				mode.datetime = ms
			}
			var err error
			parsed, err = parseTopics(topics)
			return err
		},
		run: func(c *cmd) error {
			if err := c.checkInactive(group); err != nil {
				return err
			}
			rs, err := c.planReset(group, parsed, mode)
			if err != nil {
				return err
			}
			if execute {
				var os kadm.Offsets
				for _, r := range rs {
					if r.Error == "" {
						os.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.NewOffset, LeaderEpoch: -1})
					}
				}
				ctx, cancel := c.context()
				defer cancel()
				committed, err := c.adm.CommitOffsets(ctx, group, os)
				if err != nil {
					return err
				}
				for i, r := range rs {
					if cr, ok := committed.Lookup(r.Topic, r.Partition); ok && cr.Err != nil {
						rs[i].Error = errText(cr.Err)
					}
				}
			}
			for _, r := range rs {
				if r.Error != "" {
					c.fail(fmt.Sprintf("%s %s/%d", group, r.Topic, r.Partition), errors.New(r.Error))
				}
			}
			if c.json {
				return c.document(struct {
					Group      string     `json:"group"`
					Executed   bool       `json:"executed"`
					Partitions []resetDoc `json:"partitions"`
				}{group, execute, rs})
			}
			var rows [][]string
			for _, r := range rs {
				cur := "-"
				if r.CurrentOffset != nil {
					cur = itoa(*r.CurrentOffset)
				}
				next := itoa(r.NewOffset)
				if r.Error != "" {
					next = "-"
				}
				rows = append(rows, []string{group, r.Topic, itoa(r.Partition), cur, next})
			}
			c.table([]string{"GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"}, rows)
			if !execute {
				fmt.Fprintln(c.stderr, "dry run: nothing was committed; add --execute to commit these offsets")
			}
			return nil
		},
	}
}

type statusDoc struct {
	Topic     string `json:"topic,omitempty"`
	Partition *int32 `json:"partition,omitempty"`
	Group     string `json:"group,omitempty"`
	Error     string `json:"error,omitempty"`
}

func status(err error) string {
	if err == nil {
		return "ok"
	}
	return errText(err)
}

func deleteOffsets(fs *flag.FlagSet) action {
	var group string
	var topics stringList
	var parsed []topicArg
	fs.StringVar(&group, "group", "", "the `group` whose offsets are deleted")
	fs.Var(&topics, "topic", "a `topic`, or topic:partition,partition; repeatable")
	return action{
		check: func() error {
			switch {
			case group == "":
				return errors.New("want --group")
			case len(topics) == 0:
				return errors.New("want --topic")
			}
			var err error
			parsed, err = parseTopics(topics)
			return err
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			set := kadm.TopicsSet{}
			var whole []string
			for _, t := range parsed {
				if t.partitions == nil {
					whole = append(whole, t.topic)
				} else {
					set.Add(t.topic, t.partitions...)
				}
			}
			if len(whole) > 0 {
				details, err := c.adm.ListTopics(ctx, whole...)
				if err != nil {
					return err
				}
				for _, t := range whole {
					d, ok := details[t]
					if !ok || d.Err != nil {
						return fmt.Errorf("topic %s: %w", t, kerr.UnknownTopicOrPartition)
					}
					set.Add(t, d.Partitions.Numbers()...)
				}
			}
			deleted, err := c.adm.DeleteOffsets(ctx, group, set)
			if err != nil {
				return err
			}
			docs := []statusDoc{}
			var rows [][]string
			for _, tp := range set.Sorted() {
				for _, p := range tp.Partitions {
					perr, ok := deleted.Lookup(tp.Topic, p)
					if !ok {
						perr = errors.New("no answer for the partition")
					}
					if perr != nil {
						c.fail(fmt.Sprintf("%s %s/%d", group, tp.Topic, p), perr)
					}
					p := p
					docs = append(docs, statusDoc{Topic: tp.Topic, Partition: &p, Error: errText(perr)})
					rows = append(rows, []string{group, tp.Topic, itoa(p), status(perr)})
				}
			}
			if c.json {
				return c.document(struct {
					Group      string      `json:"group"`
					Partitions []statusDoc `json:"partitions"`
				}{group, docs})
			}
			c.table([]string{"GROUP", "TOPIC", "PARTITION", "STATUS"}, rows)
			return nil
		},
	}
}

func deleteGroups(fs *flag.FlagSet) action {
	var groups stringList
	fs.Var(&groups, "group", "the `group` to delete; repeatable")
	return action{
		check: func() error {
			if len(groups) == 0 {
				return errors.New("want --group")
			}
			return nil
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			deleted, err := c.adm.DeleteGroups(ctx, groups...)
			if err != nil {
				var se *kadm.ShardErrors
				if !errors.As(err, &se) || se.AllFailed {
					return err
				}
			}
			names := append([]string(nil), groups...)
			sort.Strings(names)
			docs := []statusDoc{}
			var rows [][]string
			for _, g := range names {
				r, ok := deleted[g]
				gerr := withMessage(r.Err, r.ErrMessage)
				if !ok {
					gerr = errors.New("no answer for the group")
				}
				if gerr != nil {
					c.fail(g, gerr)
				}
				docs = append(docs, statusDoc{Group: g, Error: errText(gerr)})
				rows = append(rows, []string{g, status(gerr)})
			}
			if c.json {
				return c.document(struct {
					Groups []statusDoc `json:"groups"`
				}{docs})
			}
			c.table([]string{"GROUP", "STATUS"}, rows)
			return nil
		},
	}
}

// partitionsText is an assignment as one cell: topic:p,p topic:p.
func partitionsText(ts []topicDoc) string {
	out := ""
	for _, t := range ts {
		if out != "" {
			out += " "
		}
		out += t.Topic + ":"
		for i, p := range t.Partitions {
			if i > 0 {
				out += ","
			}
			out += itoa(p)
		}
	}
	return dash(out)
}
