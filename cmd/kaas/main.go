// Command kaas runs one kaas broker. With no flags it is a single broker on
// 127.0.0.1:9092 keeping its data under ./data; `kaas --help` lists every setting.
// `kaas groups ...`, `kaas topics ...` and `kaas transactions ...` are the operator's
// tools (package admin), which talk to any Kafka-compatible cluster instead of
// starting a broker.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"kaas/admin"
	"kaas/broker"
	"kaas/config"
)

func main() { os.Exit(run()) }

func run() int {
	// A subcommand is dispatched before the broker's settings are read.
	if len(os.Args) > 1 && (os.Args[1] == "groups" || os.Args[1] == "topics" || os.Args[1] == "transactions") {
		return admin.Main(os.Args[1:], os.Stdout, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "users" {
		return usersMain(os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	}
	for _, a := range os.Args[1:] {
		if a == "--version" || a == "-version" {
			fmt.Printf("kaas %s %s %s/%s\n", broker.VersionString(), broker.GoVersion(), runtime.GOOS, runtime.GOARCH)
			return 0
		}
	}
	cfg, err := config.FromEnv(os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "\n%s\n  kaas users set | delete | list   (SASL users in <data.dir>/__cluster/users.json)\n", admin.Commands)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaas: %v\n", err)
		return 2
	}
	log, err := newLogger(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaas: %v\n", err)
		return 2
	}
	broker.SpareProc()
	stopChaos := startChaos(cfg, log)
	defer stopChaos()
	b, err := broker.Start(cfg, log)
	if err != nil {
		log.Error().Err(err).Msg("kaas_start_failed")
		return 1
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	sig := <-sigs
	log.Info().Str("signal", sig.String()).Msg("kaas_stopping")
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	go func() {
		// A second signal, or a stop that overruns its budget, ends the process.
		select {
		case <-sigs:
		case <-time.After(cfg.ShutdownTimeout + time.Second):
		}
		log.Error().Msg("kaas_forced_exit")
		os.Exit(1)
	}()
	if err := b.Stop(ctx); err != nil {
		log.Error().Err(err).Msg("kaas_stop_failed")
		return 1
	}
	return 0
}

// newLogger builds the root logger: JSON, or console when stderr is a terminal.
func newLogger(cfg config.Config) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Logger{}, fmt.Errorf("log.level %q: want debug, info, warn or error", cfg.LogLevel)
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	format := cfg.LogFormat
	if format == "" {
		format = "json"
		if isatty.IsTerminal(os.Stderr.Fd()) {
			format = "console"
		}
	}
	var log zerolog.Logger
	if format == "console" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"})
	} else {
		log = zerolog.New(os.Stderr)
	}
	ctx := log.Level(lvl).With().Timestamp()
	if cfg.Registry != "dev" {
		// Brokers of one cluster often share a log stream: every line says whose it is.
		ctx = ctx.Int32("node_id", cfg.NodeID)
	}
	return ctx.Logger(), nil
}
