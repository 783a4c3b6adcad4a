// Package datamode holds the permissions the broker gives the files and directories it
// creates under data.dir (committed offsets, journal segments, partition segments, the
// topic catalogue, producer ids, the cluster id): the users' data, so by default only the
// broker's own user may read them (files 0600, directories 0700). data.file.mode widens
// them for an operator who needs group access; directories get an execute bit wherever
// files get a read bit. The process umask still applies.
package datamode

import (
	"io/fs"
	"sync/atomic"
)

// DefaultFile is the default mode of data files.
const DefaultFile fs.FileMode = 0o600

var file atomic.Uint32

func init() { file.Store(uint32(DefaultFile)) }

// Set makes m (its permission bits) the mode of the data files created from now on; the
// broker calls it at start, before any is created.
// A zero mode (a Config not made from config.Default) is DefaultFile.
func Set(m fs.FileMode) {
	if m.Perm() == 0 {
		m = DefaultFile
	}
	file.Store(uint32(m.Perm()))
}

// File is the mode to create a data file with.
func File() fs.FileMode { return fs.FileMode(file.Load()) }

// Dir is the mode to create a data directory with: File's bits, plus execute (search)
// wherever File can read, plus read, write and search for the owner.
func Dir() fs.FileMode { return DirFor(File()) }

// DirFor is the directory mode that goes with file mode m.
func DirFor(m fs.FileMode) fs.FileMode {
	d := m.Perm() | 0o700
	if d&0o040 != 0 {
		d |= 0o010
	}
	if d&0o004 != 0 {
		d |= 0o001
	}
	return d
}
