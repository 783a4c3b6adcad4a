// Package crash kills a real kaas broker process with SIGKILL while a producer writes
// with acks=all, restarts it, and checks that every acknowledged record is still there,
// in order, and that no torn write is ever served; and kills it while the cleaner
// compacts a topic, checking that every key keeps its newest acknowledged value and that
// no half-cleaned segment survives a restart.
package crash
