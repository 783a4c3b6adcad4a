package scenario

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Env is one scenario run's settings, given by e2e/run.sh through E2E_* variables so that
// the Go, node, python and shell clients all read the same ones.
type Env struct {
	Brokers    []string      // E2E_BROKERS: comma-separated host:port
	Topic      string        // E2E_TOPIC
	Group      string        // E2E_GROUP
	Records    int           // E2E_RECORDS: how many records to produce (10000)
	Partitions int           // E2E_PARTITIONS: partitions of the topic (6)
	Restart    string        // E2E_RESTART: shell command that restarts the broker; empty: no restart
	Timeout    time.Duration // E2E_TIMEOUT_S: the whole scenario's deadline
	// SASL, when SASLMechanism is set (E2E_SASL_MECHANISM: PLAIN, SCRAM-SHA-256 or
	// SCRAM-SHA-512; E2E_SASL_USER, E2E_SASL_PASSWORD): every connection authenticates.
	SASLMechanism string
	SASLUser      string
	SASLPassword  string
}

// FromEnv reads Env from the environment, with defaults that fit a broker on 127.0.0.1:9092.
func FromEnv(client string) Env {
	e := Env{
		Brokers:    strings.Split(get("E2E_BROKERS", "127.0.0.1:9092"), ","),
		Topic:      get("E2E_TOPIC", "e2e-"+client),
		Group:      get("E2E_GROUP", "e2e-"+client+"-group"),
		Records:    getInt("E2E_RECORDS", 10000),
		Partitions: getInt("E2E_PARTITIONS", 6),
		Restart:    os.Getenv("E2E_RESTART"),
		Timeout:    time.Duration(getInt("E2E_TIMEOUT_S", 100)) * time.Second,

		SASLMechanism: os.Getenv("E2E_SASL_MECHANISM"),
		SASLUser:      os.Getenv("E2E_SASL_USER"),
		SASLPassword:  os.Getenv("E2E_SASL_PASSWORD"),
	}
	return e
}

func get(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func getInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
		return n
	}
	return def
}

// RestartBroker runs the E2E_RESTART command (SIGTERM the broker, start it again on the same
// port and data dir, wait until it listens). It is a no-op when no command is set.
func (e Env) RestartBroker(ctx context.Context) error {
	if e.Restart == "" {
		return nil
	}
	out, err := exec.CommandContext(ctx, "sh", "-c", e.Restart).CombinedOutput()
	if err != nil {
		return fmt.Errorf("restart broker (%s): %w: %s", e.Restart, err, strings.TrimSpace(string(out)))
	}
	return nil
}
