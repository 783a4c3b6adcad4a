// Package logs holds small helpers for the broker's zerolog logging: a limiter that keeps
// an error repeated many times a second (a full disk, a dead volume) to one line per
// interval, with how many it left out; ID, which caps a client-supplied id for a log
// field; and Panic, the one way a recovered panic is logged.
//
// The convention: one event per thing that happened, its message a snake_case event
// name (group_stable, offsets_journal_write_failed), its facts in fields; ids from
// clients through ID; durations in fields ending in _ms.
package logs
