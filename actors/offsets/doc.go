// Package offsets is the per-group offsets actor: it owns one group's durable file under
// <data.dir>/__cluster/__consumer_offsets, answers commits only once the broker's offsets
// journal has made them durable, batches the commits that queue meanwhile into the next
// append, and rewrites the file behind the journal.
package offsets
