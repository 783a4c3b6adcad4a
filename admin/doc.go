// Package admin is the operator's command line: `kaas groups ...` and `kaas topics ...`,
// modelled on Apache Kafka's kafka-consumer-groups.sh and kafka-topics.sh. It talks the
// Kafka protocol through franz-go's kadm, so it works against any Kafka-compatible
// cluster, prints aligned tables or one JSON document (--json), and exits 0 when every
// operation succeeded, 1 when one failed (a Kafka error for a group, topic or partition
// included) and 2 on a usage error. Errors are one line on stderr: `kaas: <what>: <why>`.
package admin
