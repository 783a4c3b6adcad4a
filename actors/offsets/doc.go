// Package offsets is the per-group offsets actor: it owns one group's durable file under
// <data.dir>/__cluster/__consumer_offsets, answers commits only once the broker's offsets
// journal has made them durable, batches the commits that queue meanwhile into the next
// append, and rewrites the file behind the journal. It also keeps the group's pending
// layer of transactional offsets (TxnOffsetCommit, KIP-447) per producer, journaled and
// in the file like the committed offsets, invisible to Fetch until a commit marker
// (TxnEnd) applies them.
package offsets
