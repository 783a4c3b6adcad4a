// Package partition is the data plane: the topics manager (the catalogue of topics and
// partitions under <data.dir>/topics/) and one actor per topic-partition that owns its log
// segments, serves produce, fetch and offset lookups, and keeps idempotent-producer state.
package partition
