// Package databench measures the data path (produce and consume throughput of 1 KiB
// records with acks=all, and end-to-end latency) against kaas and franz-go's kfake in the
// same run, and reports kaas's figures as ratios of kfake's. BenchmarkColdReadProduce
// measures produce latency and throughput on a partition that eight consumers read from
// offset 0, its sealed segments kept out of the page cache. BenchmarkCleanerProduce
// measures produce p99 with and without log compaction running on the same broker, and
// the MB/s of dirty log cleaned.
package databench
