//go:build !chaos

package main

import (
	"github.com/rs/zerolog"

	"kaas/config"
)

// startChaos is a no-op without the chaos build tag: production binaries carry no
// fault injector.
func startChaos(config.Config, zerolog.Logger) func() { return func() {} }
