// Package partition is the data plane: the topics manager (the catalogue of topics and
// partitions under <data.dir>/topics/) and one actor per topic-partition that owns its log
// segments, serves produce, fetch and offset lookups, and keeps idempotent-producer state.
// The connections send those requests to the partition actors themselves, by the
// catalogue the manager publishes (Catalog); a Fetch's long poll runs in the connection
// that serves it (FetchRun).
package partition
