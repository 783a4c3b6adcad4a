// Package group is the consumer-group coordinator: one actor per group running Apache
// Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, with
// KIP-345 static members and KIP-394 pending members) or the consumer group protocol
// (KIP-848: ConsumerGroupHeartbeat and ConsumerGroupDescribe, member epochs, server-side
// uniform and range assignors, consumer.go), validating offset requests before its
// offsets actor stores them (transactional ones, KIP-447, into a pending layer that
// the transaction coordinator's TxnOffsetMarker commits or aborts), and a manager that
// spawns, routes to, passivates and supervises the group actors.
package group
