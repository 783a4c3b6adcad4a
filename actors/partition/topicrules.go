package partition

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// topicRules say, per topic config, what value it may take beyond its type: Apache's
// range (LogConfig's ConfigDef, with its messages), and where kaas would not apply a
// value, a refusal that says so. A config without a rule takes any value of its type.
// The three kinds (applied, refused past what kaas does, accepted with no effect) are
// listed at topicConfigs.
var topicRules = map[string]func(name, v string) error{
	"segment.bytes":                       atLeast(14),
	"segment.ms":                          atLeast(1),
	"segment.jitter.ms":                   atLeast(0),
	"segment.index.bytes":                 atLeast(4),
	"flush.messages":                      atLeast(1),
	"flush.ms":                            atLeast(0),
	"retention.ms":                        atLeast(-1),
	"max.message.bytes":                   atLeast(0),
	"index.interval.bytes":                atLeast(0),
	"delete.retention.ms":                 atLeast(0),
	"min.compaction.lag.ms":               atLeast(0),
	"file.delete.delay.ms":                atLeast(0),
	"message.timestamp.difference.max.ms": atLeast(0),
	"message.timestamp.before.max.ms":     atLeast(0),
	"message.timestamp.after.max.ms":      atLeast(0),
	"local.retention.ms":                  atLeast(-2),
	"local.retention.bytes":               atLeast(-2),
	"min.cleanable.dirty.ratio":           checkDirtyRatio,
	"cleanup.policy":                      checkCleanupPolicy,
	"message.timestamp.type":              oneOf("CreateTime", "LogAppendTime"),
	"max.compaction.lag.ms":               atLeast(1),
	"compression.type":                    oneOf("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
	"min.insync.replicas": func(name, v string) error {
		if err := atLeast(1)(name, v); err != nil {
			return err
		}
		if v != "1" {
			// One copy of the log exists (on the shared volume): Apache, with one replica,
			// would answer every acks=all produce NOT_ENOUGH_REPLICAS, a retriable code a
			// producer retries until its delivery timeout. Refused here, where it is set.
			return fmt.Errorf("Invalid value %s for configuration %s: kaas keeps one copy of each partition (on the data volume), so only 1 can be met", v, name)
		}
		return nil
	},
	"remote.storage.enable": func(name, v string) error {
		if b, _ := strconv.ParseBool(v); b {
			// Apache's answer on a broker without tiered storage.
			return fmt.Errorf("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.")
		}
		return nil
	},
	"leader.replication.throttled.replicas":   checkThrottledReplicas,
	"follower.replication.throttled.replicas": checkThrottledReplicas,
	"message.format.version":                  checkFormatVersion,
}

// atLeast is ConfigDef.Range.atLeast.
func atLeast(least int64) func(name, v string) error {
	return func(name, v string) error {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n < least {
			return fmt.Errorf("Invalid value %s for configuration %s: Value must be at least %d", v, name, least)
		}
		return nil
	}
}

// oneOf is ConfigDef.ValidString.in.
func oneOf(values ...string) func(name, v string) error {
	return func(name, v string) error {
		for _, ok := range values {
			if v == ok {
				return nil
			}
		}
		return fmt.Errorf("Invalid value %s for configuration %s: String must be one of: %s", v, name, strings.Join(values, ", "))
	}
}

func checkDirtyRatio(name, v string) error {
	f, _ := strconv.ParseFloat(v, 64)
	switch {
	case f < 0:
		return fmt.Errorf("Invalid value %s for configuration %s: Value must be at least 0", v, name)
	case f > 1:
		return fmt.Errorf("Invalid value %s for configuration %s: Value must be no more than 1", v, name)
	}
	return nil
}

// throttledReplica is one entry of a replication throttle list: partition:broker.
var throttledReplica = regexp.MustCompile(`^\s*[0-9]+\s*:\s*[0-9]+\s*$`)

// checkThrottledReplicas is Apache's ThrottledReplicaListValidator: "*" or a list of
// partition:broker. kafka-reassign-partitions sets these while it moves replicas; kaas
// has no replicas to move, so they have no effect (README, Limitations).
func checkThrottledReplicas(name, v string) error {
	if strings.TrimSpace(v) == "*" || strings.TrimSpace(v) == "" {
		return nil
	}
	for _, e := range strings.Split(v, ",") {
		if !throttledReplica.MatchString(e) {
			return fmt.Errorf("Invalid value %s for configuration %s: Should be a list of [PartitionId]:[BrokerId] or \"*\" to throttle all replicas", v, name)
		}
	}
	return nil
}

// formatVersion is a MetadataVersion string: 0.8.0 to 3.x, with an optional -IVn.
var formatVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?(-IV[0-9]+)?$`)

// checkFormatVersion accepts what MetadataVersionValidator does in shape. Apache 3.0+
// ignores the value (every batch is v2) and so does kaas, which reads and writes v2 only.
func checkFormatVersion(name, v string) error {
	if !formatVersion.MatchString(v) {
		return fmt.Errorf("Invalid value %s for configuration %s: Version %s is not a valid version", v, name, v)
	}
	return nil
}
