// Package logs holds small helpers for the broker's zerolog logging: a limiter that keeps
// an error repeated many times a second (a full disk, a dead volume) to one line per
// interval, with how many it left out.
package logs
