//go:build chaos

package main

import (
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"kaas/chaos"
	"kaas/config"
)

// startChaos, in a binary built with -tags chaos (tests only: e2e/cluster), puts the
// seeded fault injector of package chaos into this process when KAAS_CHAOS_SEED is set:
// actor panics, delays and timer faults, failed and slow storage steps, connection resets
// and retriable errors, as the in-process chaos runs inject them. Each broker draws from
// the seed plus its node id. The returned func logs what fired.
func startChaos(cfg config.Config, log zerolog.Logger) func() {
	s := os.Getenv("KAAS_CHAOS_SEED")
	if s == "" {
		return func() {}
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		log.Error().Str("value", s).Msg("chaos_seed_invalid_ignored")
		return func() {}
	}
	seed += uint64(cfg.NodeID)
	in := chaos.New(seed, nil)
	uninstall := in.Install(nil)
	in.On()
	log.Warn().Uint64("seed", seed).Msg("chaos_injector_on")
	counts := func(msg string) {
		c := in.Counts()
		ev := log.Info().Uint64("seed", seed)
		for _, k := range chaos.Kinds {
			ev = ev.Int(string(k), c[k])
		}
		ev.Msg(msg)
	}
	// What fired so far, every few seconds: a kill -9 leaves no last word.
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				counts("chaos_injector_fired")
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		in.Off()
		uninstall()
		counts("chaos_injector_off")
	}
}
