package peer

import "testing"

func TestTxnGroupTopic(t *testing.T) {
	for _, g := range []string{"g", "my-group", "a:b", "__consumer_offsets", " "} {
		topic := TxnGroupTopic(g)
		got, ok := TxnGroupOf(topic)
		if !ok || got != g {
			t.Fatalf("TxnGroupOf(TxnGroupTopic(%q)) = %q, %v", g, got, ok)
		}
	}
	// Real topics, the offsets topic's own name included, carry no group; neither does
	// the bare prefix (a group needs a name).
	for _, topic := range []string{"orders", "__consumer_offsets", "__consumer_offsets:", "x__consumer_offsets:g", ""} {
		if g, ok := TxnGroupOf(topic); ok {
			t.Fatalf("TxnGroupOf(%q) = %q, true; want false", topic, g)
		}
	}
}
