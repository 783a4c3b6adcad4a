package kube

import (
	"log/slog"

	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// RouteClientLogs sends client-go's own logs (klog: informers, reflectors, leader
// election) to log, under the group "client_go" and at Warn or above, so that a broker
// writes only zerolog lines; its own events (registry_synced, lease_lost, ...) say what
// happened. klog is process-wide: main calls this once, before any source or fence starts.
func RouteClientLogs(log zerolog.Logger) {
	level := log.GetLevel()
	if level < zerolog.WarnLevel {
		level = zerolog.WarnLevel
	}
	klog.SetSlogLogger(slog.New(zerolog.NewSlogHandler(log.Level(level)).WithGroup("client_go")))
}
