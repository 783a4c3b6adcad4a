package broker

import (
	"runtime/debug"
	"strings"
)

// Version is the kaas version, set at build time with -ldflags "-X kaas/broker.Version=...".
// Left at "dev", VersionString reads what the Go toolchain stamped into the binary.
var Version = "dev"

// VersionString names this build: the -X version if one was set, else the module version
// (a tagged `go install kaas/cmd/kaas@vX`), else the VCS revision `go build` stamps in a
// checkout (with "+dirty" for uncommitted changes), else "dev" (`go run` stamps none).
func VersionString() string {
	if Version != "dev" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, when string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return Version
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	var b strings.Builder
	b.WriteString("dev-")
	b.WriteString(rev)
	if dirty {
		b.WriteString("+dirty")
	}
	if when != "" {
		b.WriteString(" (")
		b.WriteString(when)
		b.WriteString(")")
	}
	return b.String()
}

// GoVersion is the Go release the binary was built with.
func GoVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.GoVersion
	}
	return "unknown"
}
