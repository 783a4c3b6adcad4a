// Package pinbench measures the memory a client can pin on the broker: the broker
// process's peak RSS with four connections that pipeline 64 Fetches of 16 MiB and never
// read, on a 20 MB topic; and the Go heap of an in-process broker with 60 connections that
// each announce a 100 MB frame and then send a byte a second.
//
//	go test ./e2e/pinbench/ -run '^$' -bench . -benchtime 1x
package pinbench
