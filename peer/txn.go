package peer

import "strings"

// txnGroupPrefix starts the reserved topic name a group travels under between brokers.
// ':' is no legal topic character, so no real topic ever has such a name.
const txnGroupPrefix = "__consumer_offsets:"

// TxnGroupTopic is how a group travels in the inter-broker transaction requests that
// only name topics: a transaction coordinator's WriteTxnMarkers ending a producer's
// pending offsets in a group another broker coordinates, and a group coordinator's
// AddPartitionsToTxn (v4+) verifying, or adding, a group in a producer's transaction
// with a coordinator on another broker. The group is the topic's partition 0.
func TxnGroupTopic(group string) string { return txnGroupPrefix + group }

// TxnGroupOf is the group a reserved topic name carries (TxnGroupTopic), or false for
// any other name.
func TxnGroupOf(topic string) (string, bool) {
	g, ok := strings.CutPrefix(topic, txnGroupPrefix)
	if !ok || g == "" {
		return "", false
	}
	return g, true
}
