package watchdog

import (
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// init makes this binary the watchdog when Start started it, before anything else of
// the program runs (any binary that links the package, tests included, can be one).
func init() {
	v := os.Getenv(envFD)
	if v == "" {
		return
	}
	fd, err := strconv.Atoi(v)
	if err != nil {
		os.Exit(2)
	}
	staleMS, _ := strconv.ParseInt(os.Getenv(envStale), 10, 64)
	if staleMS <= 0 {
		os.Exit(2)
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("component", "pause_watchdog").
		Int("broker_pid", os.Getppid()).Logger()
	os.Exit(watch(fd, time.Duration(staleMS)*time.Millisecond, log))
}

// tick is how often the watchdog checks its broker when no message arrives.
const tick = 20 * time.Millisecond

// watch is the watchdog's life: it holds the sockets it is sent and shuts them down once
// its broker's lease has ended without a heartbeat for stale. It ends when the broker's
// end of the socket pair closes (the broker stopped or died).
func watch(fd int, stale time.Duration, log zerolog.Logger) int {
	held := map[int64]int{}
	var (
		leaseEnd int64 // CLOCK_MONOTONIC ns; 0: no lease, nothing to watch
		lastBeat = monoNow()
		fired    bool
	)
	tv := unix.NsecToTimeval(tick.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		log.Error().Err(err).Msg("pause_watchdog_failed")
		return 1
	}
	buf := make([]byte, msgLen)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		now := monoNow()
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
		case err != nil || n == 0:
			// The broker's end closed: it stopped or died. Exiting closes every
			// duplicate; a socket the broker still had open stays open in the broker.
			return 0
		case n != msgLen:
			log.Error().Int("bytes", n).Msg("pause_watchdog_bad_message")
			return 1
		default:
			a := int64(binary.LittleEndian.Uint64(buf[1:]))
			switch buf[0] {
			case msgBeat:
				lastBeat, leaseEnd = now, a
				if fired {
					fired = false
					log.Info().Msg("pause_watchdog_broker_running")
				}
			case msgTrack:
				if got := rights(oob[:oobn]); len(got) == 1 {
					held[a] = got[0]
				} else {
					for _, f := range got {
						unix.Close(f)
					}
				}
			case msgDrop:
				if f, ok := held[a]; ok {
					unix.Close(f)
					delete(held, a)
				}
			}
		}
		if !fired && leaseEnd != 0 && now >= leaseEnd && now-lastBeat >= stale.Nanoseconds() {
			fired = true
			// Oldest first: the listener, then its connections in the order they were
			// accepted. The peers' held connections (registry) are among the oldest, so
			// peers mostly see the end before a client that asks them for Metadata.
			shut := 0
			for _, id := range slices.Sorted(maps.Keys(held)) {
				if unix.Shutdown(held[id], unix.SHUT_RDWR) == nil {
					shut++
				}
			}
			log.Warn().Int("sockets", shut).Int64("lease_ended_ms_ago", (now-leaseEnd)/1e6).
				Int64("silent_ms", (now-lastBeat)/1e6).Msg("pause_watchdog_fired")
		}
	}
}

// rights are the descriptors an SCM_RIGHTS control message carried.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}
