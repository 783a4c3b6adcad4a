// Package databench measures the data path (produce and consume throughput of 1 KiB
// records with acks=all, and end-to-end latency) against kaas and franz-go's kfake in the
// same run, and reports kaas's figures as ratios of kfake's.
package databench
