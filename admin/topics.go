package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var topicVerbs = []verb{
	{"list", "list the topics with their partition counts", listTopics},
	{"describe", "the partitions of some topics (--topic) or all, with their non-default configs", describeTopics},
	{"create", "create topics", createTopics},
	{"delete", "delete topics and their records", deleteTopics},
	{"alter-config", "set topic configs, or delete them back to their defaults", alterTopicConfigs},
	{"delete-records", "delete a topic's records below an offset (moves the log start offset, as kafka-delete-records)", deleteRecords},
}

type topicListDoc struct {
	Topic             string `json:"topic"`
	ID                string `json:"id"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
	Internal          bool   `json:"internal"`
}

func listTopics(fs *flag.FlagSet) action {
	var internal bool
	fs.BoolVar(&internal, "internal", false, "list internal topics too")
	return action{run: func(c *cmd) error {
		ctx, cancel := c.context()
		defer cancel()
		details, err := c.adm.ListTopicsWithInternal(ctx)
		if err != nil {
			return err
		}
		docs := []topicListDoc{}
		var rows [][]string
		for _, d := range details.Sorted() {
			if d.IsInternal && !internal {
				continue
			}
			if d.Err != nil {
				c.fail(d.Topic, d.Err)
				continue
			}
			doc := topicListDoc{d.Topic, d.ID.String(), len(d.Partitions), d.Partitions.NumReplicas(), d.IsInternal}
			docs = append(docs, doc)
			rows = append(rows, []string{doc.Topic, itoa(doc.Partitions), itoa(doc.ReplicationFactor)})
		}
		if c.json {
			return c.document(struct {
				Topics []topicListDoc `json:"topics"`
			}{docs})
		}
		c.table([]string{"TOPIC", "PARTITIONS", "REPLICATION-FACTOR"}, rows)
		return nil
	}}
}

type topicDescDoc struct {
	Topic      string            `json:"topic"`
	ID         string            `json:"id"`
	Internal   bool              `json:"internal"`
	Partitions []partitionDoc    `json:"partitions"`
	Configs    map[string]string `json:"configs"`
	Error      string            `json:"error,omitempty"`
}

type partitionDoc struct {
	Partition   int32   `json:"partition"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	// SizeBytes is the bytes of the partition's segments on its leader's volume
	// (DescribeLogDirs), -1 when the leader did not say.
	SizeBytes int64  `json:"size_bytes"`
	Error     string `json:"error,omitempty"`
}

func describeTopics(fs *flag.FlagSet) action {
	var topics stringList
	fs.Var(&topics, "topic", "the `topic` to describe; repeatable (default every topic)")
	return action{run: func(c *cmd) error {
		ctx, cancel := c.context()
		defer cancel()
		details, err := c.adm.ListTopics(ctx, topics...)
		if err != nil {
			return err
		}
		docs := []topicDescDoc{}
		var names []string
		for _, d := range details.Sorted() {
			doc := topicDescDoc{Topic: d.Topic, ID: d.ID.String(), Internal: d.IsInternal, Partitions: []partitionDoc{}, Configs: map[string]string{}}
			if d.Err != nil {
				doc.Error = errText(d.Err)
				c.fail(d.Topic, d.Err)
			} else {
				names = append(names, d.Topic)
			}
			for _, p := range d.Partitions.Sorted() {
				pd := partitionDoc{p.Partition, p.Leader, p.LeaderEpoch, nonNil(p.Replicas), nonNil(p.ISR), -1, errText(p.Err)}
				// A partition that is moving (or was created a moment ago) has no leader
				// for a moment: kafka-topics shows it as "Leader: none" and does not fail.
				if p.Err != nil && !errors.Is(p.Err, kerr.LeaderNotAvailable) {
					c.fail(fmt.Sprintf("%s/%d", d.Topic, p.Partition), p.Err)
				}
				doc.Partitions = append(doc.Partitions, pd)
			}
			docs = append(docs, doc)
		}
		for _, t := range topics { // a named topic the metadata left out
			if !details.Has(t) {
				docs = append(docs, topicDescDoc{Topic: t, Partitions: []partitionDoc{}, Configs: map[string]string{}, Error: errText(kerr.UnknownTopicOrPartition)})
				c.fail(t, kerr.UnknownTopicOrPartition)
			}
		}
		if len(names) > 0 {
			c.sizes(ctx, docs)
			configs, err := c.adm.DescribeTopicConfigs(ctx, names...)
			if err != nil {
				var se *kadm.ShardErrors
				if !errors.As(err, &se) {
					return fmt.Errorf("describe configs: %w", err)
				}
			}
			byName := map[string]kadm.ResourceConfig{}
			for _, rc := range configs {
				byName[rc.Name] = rc
			}
			for i := range docs {
				rc, ok := byName[docs[i].Topic]
				if !ok {
					continue
				}
				if rc.Err != nil {
					c.fail(docs[i].Topic+" configs", rc.Err)
					continue
				}
				for _, cf := range rc.Configs {
					// The topic's own settings, as kafka-topics --describe prints them.
					if cf.Source == kmsg.ConfigSourceDynamicTopicConfig && cf.Value != nil && !cf.Sensitive {
						docs[i].Configs[cf.Key] = *cf.Value
					}
				}
			}
		}
		if c.json {
			return c.document(struct {
				Topics []topicDescDoc `json:"topics"`
			}{docs})
		}
		var rows, confRows [][]string
		for _, d := range docs {
			for _, p := range d.Partitions {
				size := "-"
				if p.SizeBytes >= 0 {
					size = strconv.FormatInt(p.SizeBytes, 10)
				}
				rows = append(rows, []string{d.Topic, itoa(p.Partition), itoa(p.Leader), ints(p.Replicas), ints(p.ISR), size})
			}
			for _, k := range sortedKeys(d.Configs) {
				confRows = append(confRows, []string{d.Topic, k, d.Configs[k]})
			}
		}
		c.table([]string{"TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "SIZE"}, rows)
		if len(confRows) > 0 {
			fmt.Fprintln(c.stdout)
			c.table([]string{"TOPIC", "CONFIG", "VALUE"}, confRows)
		}
		return nil
	}}
}

// sizes fills in each partition's size from its leader's DescribeLogDirs answer. A size
// is extra: a broker that does not answer (down, or the principal may not describe the
// cluster) leaves its partitions' sizes unknown and fails nothing.
func (c *cmd) sizes(ctx context.Context, docs []topicDescDoc) {
	set := kadm.TopicsSet{}
	for i := range docs {
		for _, p := range docs[i].Partitions {
			set.Add(docs[i].Topic, p.Partition)
		}
	}
	dirs, _ := c.adm.DescribeAllLogDirs(ctx, set)
	for i := range docs {
		for j := range docs[i].Partitions {
			p := &docs[i].Partitions[j]
			if ds, ok := dirs[p.Leader]; ok && ds.Error() == nil {
				if d, ok := ds.LookupPartition(docs[i].Topic, p.Partition); ok {
					p.SizeBytes = d.Size
				}
			}
		}
	}
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

func ints(s []int32) string {
	if len(s) == 0 {
		return "-"
	}
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = itoa(v)
	}
	return strings.Join(parts, ",")
}

type createdDoc struct {
	Topic             string `json:"topic"`
	ID                string `json:"id,omitempty"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int16  `json:"replication_factor"`
	Error             string `json:"error,omitempty"`
}

func createTopics(fs *flag.FlagSet) action {
	var (
		topics     stringList
		configs    stringList
		partitions int
		rf         int
		settings   map[string]*string
	)
	fs.Var(&topics, "topic", "the `topic` to create; repeatable")
	fs.IntVar(&partitions, "partitions", -1, "the number of `partitions` (-1: the broker's num.partitions)")
	fs.IntVar(&rf, "replication-factor", -1, "the replication `factor` (-1: the broker's default.replication.factor)")
	fs.Var(&configs, "config", "a topic setting `key=value`; repeatable")
	return action{
		check: func() error {
			switch {
			case len(topics) == 0:
				return errors.New("want --topic")
			case partitions == 0 || partitions < -1 || partitions > 1<<31-1:
				return fmt.Errorf("--partitions %d: want -1 or 1 or more", partitions)
			case rf == 0 || rf < -1 || rf > 1<<15-1:
				return fmt.Errorf("--replication-factor %d: want -1 or 1 or more", rf)
			}
			for _, t := range topics {
				if t == "" {
					return errors.New("--topic is empty")
				}
			}
			settings = map[string]*string{}
			for _, kv := range configs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--config %q: want key=value", bounded(kv))
				}
				settings[k] = &v
			}
			return nil
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			created, err := c.adm.CreateTopics(ctx, int32(partitions), int16(rf), settings, topics...)
			if err != nil {
				return err
			}
			docs := []createdDoc{}
			var rows [][]string
			for _, t := range topics {
				r, ok := created[t]
				terr := withMessage(r.Err, r.ErrMessage)
				if !ok {
					terr = errors.New("no answer for the topic")
				}
				if terr != nil {
					c.fail(t, terr)
				}
				docs = append(docs, createdDoc{t, idOf(r.ID, terr), r.NumPartitions, r.ReplicationFactor, errText(terr)})
				n, rf := itoa(r.NumPartitions), itoa(r.ReplicationFactor)
				if terr != nil {
					n, rf = "-", "-"
				}
				rows = append(rows, []string{t, n, rf, status(terr)})
			}
			if c.json {
				return c.document(struct {
					Topics []createdDoc `json:"topics"`
				}{docs})
			}
			c.table([]string{"TOPIC", "PARTITIONS", "REPLICATION-FACTOR", "STATUS"}, rows)
			return nil
		},
	}
}

func idOf(id kadm.TopicID, err error) string {
	if err != nil || id == (kadm.TopicID{}) {
		return ""
	}
	return id.String()
}

func deleteTopics(fs *flag.FlagSet) action {
	var topics stringList
	fs.Var(&topics, "topic", "the `topic` to delete; repeatable")
	return action{
		check: func() error {
			if len(topics) == 0 {
				return errors.New("want --topic")
			}
			return nil
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			deleted, err := c.adm.DeleteTopics(ctx, topics...)
			if err != nil {
				return err
			}
			return c.topicStatuses(topics, func(t string) (error, bool) {
				r, ok := deleted[t]
				return withMessage(r.Err, r.ErrMessage), ok
			})
		},
	}
}

func alterTopicConfigs(fs *flag.FlagSet) action {
	var (
		topics, sets, deletes stringList
		validateOnly          bool
		ops                   []kmsg.IncrementalAlterConfigsRequestResourceConfig
	)
	fs.Var(&topics, "topic", "the `topic` to change; repeatable")
	fs.Var(&sets, "set", "a topic setting `key=value` to set; repeatable")
	fs.Var(&deletes, "delete", "a topic setting `key` to delete, back to its default; repeatable")
	fs.BoolVar(&validateOnly, "validate-only", false, "check the change and report, change nothing")
	return action{
		check: func() error {
			switch {
			case len(topics) == 0:
				return errors.New("want --topic")
			case len(sets) == 0 && len(deletes) == 0:
				return errors.New("want --set or --delete")
			}
			for _, t := range topics {
				if t == "" {
					return errors.New("--topic is empty")
				}
			}
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--set %q: want key=value", bounded(kv))
				}
				op := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
				op.Name, op.Op, op.Value = k, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(v)
				ops = append(ops, op)
			}
			for _, k := range deletes {
				if k == "" {
					return errors.New("--delete is empty")
				}
				op := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
				op.Name, op.Op = k, kmsg.IncrementalAlterConfigOpDelete
				ops = append(ops, op)
			}
			return nil
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			req.ValidateOnly = validateOnly
			for _, t := range topics {
				r := kmsg.NewIncrementalAlterConfigsRequestResource()
				r.ResourceType, r.ResourceName, r.Configs = kmsg.ConfigResourceTypeTopic, t, ops
				req.Resources = append(req.Resources, r)
			}
			// Sent to the controller: in a kaas cluster the broker that writes the topic
			// catalogue changes a topic's configs, and the others answer NOT_CONTROLLER
			// (Apache's brokers forward the request there themselves).
			md, err := c.adm.BrokerMetadata(ctx)
			if err != nil {
				return err
			}
			var kresp kmsg.Response
			if md.Controller >= 0 {
				kresp, err = c.cl.Broker(int(md.Controller)).Request(ctx, req)
			} else {
				kresp, err = req.RequestWith(ctx, c.cl)
			}
			if err != nil {
				return err
			}
			answers := map[string]error{}
			for _, r := range kresp.(*kmsg.IncrementalAlterConfigsResponse).Resources {
				msg := ""
				if r.ErrorMessage != nil {
					msg = *r.ErrorMessage
				}
				answers[r.ResourceName] = withMessage(kerr.ErrorForCode(r.ErrorCode), msg)
			}
			return c.topicStatuses(topics, func(t string) (error, bool) {
				terr, ok := answers[t]
				return terr, ok
			})
		},
	}
}

// topicStatuses reports each topic's outcome as a table or JSON, failing the command for
// each that failed; answer is a topic's error and whether the broker answered for it.
func (c *cmd) topicStatuses(topics []string, answer func(topic string) (error, bool)) error {
	docs := []statusDoc{}
	var rows [][]string
	for _, t := range topics {
		terr, ok := answer(t)
		if !ok {
			terr = errors.New("no answer for the topic")
		}
		if terr != nil {
			c.fail(t, terr)
		}
		docs = append(docs, statusDoc{Topic: t, Error: errText(terr)})
		rows = append(rows, []string{t, status(terr)})
	}
	if c.json {
		return c.document(struct {
			Topics []statusDoc `json:"topics"`
		}{docs})
	}
	c.table([]string{"TOPIC", "STATUS"}, rows)
	return nil
}

type recordsDeletedDoc struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// LowWatermark is the partition's log start offset after the deletion (-1: failed).
	LowWatermark int64  `json:"low_watermark"`
	Error        string `json:"error,omitempty"`
}

// deleteRecords moves the log start offset of a topic's partitions to --offset (-1: the
// high watermark, as in kafka-delete-records' offset file), deleting every record below.
func deleteRecords(fs *flag.FlagSet) action {
	var (
		topic      string
		partitions stringList
		offset     int64
		parts      []int32
	)
	fs.StringVar(&topic, "topic", "", "the `topic` whose records to delete")
	fs.Var(&partitions, "partition", "a `partition` of the topic; repeatable (default every partition)")
	fs.Int64Var(&offset, "offset", -2, "delete every record below this `offset`; -1: every record below the high watermark")
	return action{
		check: func() error {
			switch {
			case topic == "":
				return errors.New("want --topic")
			case offset < -1:
				return errors.New("want --offset (an offset, or -1 for the high watermark)")
			}
			for _, p := range partitions {
				n, err := strconv.ParseInt(p, 10, 32)
				if err != nil || n < 0 {
					return fmt.Errorf("--partition %q: want a partition number", bounded(p))
				}
				parts = append(parts, int32(n))
			}
			return nil
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			if len(parts) == 0 {
				details, err := c.adm.ListTopics(ctx, topic)
				if err != nil {
					return err
				}
				d, ok := details[topic]
				if !ok {
					return fmt.Errorf("topic %s: %w", topic, kerr.UnknownTopicOrPartition)
				}
				if d.Err != nil {
					return fmt.Errorf("topic %s: %w", topic, d.Err)
				}
				for _, p := range d.Partitions.Sorted() {
					parts = append(parts, p.Partition)
				}
			}
			os := kadm.Offsets{}
			for _, p := range parts {
				os.Add(kadm.Offset{Topic: topic, Partition: p, At: offset, LeaderEpoch: -1})
			}
			deleted, err := c.adm.DeleteRecords(ctx, os)
			if err != nil {
				var se *kadm.ShardErrors
				if !errors.As(err, &se) {
					return err
				}
			}
			docs := []recordsDeletedDoc{}
			var rows [][]string
			for _, p := range parts {
				r, ok := deleted.Lookup(topic, p)
				perr := r.Err
				if !ok {
					perr = errors.New("no answer for the partition")
				}
				doc := recordsDeletedDoc{Topic: topic, Partition: p, LowWatermark: -1, Error: errText(perr)}
				low := "-"
				if perr != nil {
					c.fail(fmt.Sprintf("%s/%d", topic, p), perr)
				} else {
					doc.LowWatermark = r.LowWatermark
					low = strconv.FormatInt(r.LowWatermark, 10)
				}
				docs = append(docs, doc)
				rows = append(rows, []string{topic, itoa(p), low, status(perr)})
			}
			if c.json {
				return c.document(struct {
					Partitions []recordsDeletedDoc `json:"partitions"`
				}{docs})
			}
			c.table([]string{"TOPIC", "PARTITION", "LOW-WATERMARK", "STATUS"}, rows)
			return nil
		},
	}
}
