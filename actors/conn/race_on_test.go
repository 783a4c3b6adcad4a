//go:build race

package conn

// raceEnabled: the race detector changes what allocates.
const raceEnabled = true
