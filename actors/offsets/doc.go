// Package offsets is the per-group offsets actor: it owns one group's durable file under
// <data.dir>/__cluster/__consumer_offsets, answers commits only once they are on disk, and
// batches the commits that queue during a write into the next one.
package offsets
