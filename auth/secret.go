package auth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"kaas/storage"
)

// SecretFile is the name, in <data.dir>/__cluster, of the secret every broker of the
// cluster derives unknown users' SCRAM credentials from (Credentials.fake).
const SecretFile = "scram.secret"

const secretLen = 32

// LoadSecret reads <dir>/scram.secret, making it first if there is none. It is made once
// for the cluster: written aside (data.file.mode, fsynced) and linked into place, so that of brokers
// starting together on a fresh volume one wins and every other reads the winner's. A
// secret of the wrong size, or not a regular file, refuses the start: making a new one
// would change every unknown user's salt.
func LoadSecret(fsys storage.FS, dir string) ([]byte, error) {
	path := filepath.Join(dir, SecretFile)
	b, err := readSecret(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	if err := createSecret(fsys, dir, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	// Made here, or by another broker first: what is in place is the cluster's.
	return readSecret(path)
}

func readSecret(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, secretLen+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) != secretLen {
		return nil, fmt.Errorf("%s holds %d bytes, not %d: restore it, or remove it to make a new one", path, len(b), secretLen)
	}
	return b, nil
}

// createSecret writes a new secret aside and links it to path: fs.ErrExist when another
// broker linked its own first.
func createSecret(fsys storage.FS, dir, path string) error {
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	secret := make([]byte, secretLen)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	// A name of its own (brokers starting together each write one), made with the data
	// dir's file mode like every other file there, so brokers sharing the volume under
	// different users of one group (data.file.mode 0640) can read the winner's.
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	tmp := path + "." + hex.EncodeToString(r[:]) + storage.TmpSuffix
	defer func() { _ = fsys.Remove(tmp) }()
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err = f.Write(secret); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("link %s: %w", path, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
