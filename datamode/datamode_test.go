package datamode

import (
	"io/fs"
	"testing"
)

func TestDirFor(t *testing.T) {
	for _, c := range []struct{ file, dir fs.FileMode }{
		{0o600, 0o700}, {0o640, 0o750}, {0o644, 0o755}, {0o660, 0o770}, {0o400, 0o700},
	} {
		if got := DirFor(c.file); got != c.dir {
			t.Errorf("DirFor(%o) = %o, want %o", c.file, got, c.dir)
		}
	}
}
