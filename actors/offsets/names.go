package offsets

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"kaas/storage"
)

// File names. A group id is any string a client sends (Apache accepts "", "..", "a/b",
// NUL bytes, any length), so it is never joined into a path raw. FileName encodes it:
//
//   - a-z, 0-9, '-', '_' and '.' (except a leading '.') stay as they are;
//   - an upper-case letter becomes '^' and the letter in lower case ("MyGroup" → "^my^group"),
//     so that two ids differing only in case never share a file on a case-insensitive
//     volume (SMB and some NFS shares are);
//   - every other byte becomes '%' and two lower-case hex digits ("a/b" → "a%2fb");
//   - the empty id is "~";
//   - an encoding longer than maxEncodedLen bytes is replaced by "~" and the SHA-256 of
//     the id in hex: file names have a limit (255 bytes on most file systems, 143 on
//     eCryptfs), group ids have none. The id is then known only from inside the file.
//
// then appends ".json". Every file also stores its group id, and the actor refuses a file
// whose id is not its group's, so even a hash collision cannot mix two groups.
//
// The encoding is canonical: DecodeName accepts only names that FileName produces, so
// one id has one name and one name at most one id.

const (
	fileSuffix = ".json"
	tmpSuffix  = storage.TmpSuffix
	// maxEncodedLen keeps the longest name, with ".json.tmp", under eCryptfs' 143 bytes.
	maxEncodedLen = 128
	hashedPrefix  = "~"
	emptyName     = "~"
)

// FileName is the file name (no directory) of the group's offsets file.
func FileName(group string) string {
	return encodeID(group) + fileSuffix
}

func encodeID(id string) string {
	if id == "" {
		return emptyName
	}
	var b strings.Builder
	b.Grow(len(id))
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		case c >= 'A' && c <= 'Z':
			b.WriteByte('^')
			b.WriteByte(c + ('a' - 'A'))
		default:
			const hexDigits = "0123456789abcdef"
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
		if b.Len() > maxEncodedLen {
			return hashedName(id)
		}
	}
	return b.String()
}

func hashedName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// errNotGroupFile: the name is not one FileName makes.
var errNotGroupFile = errors.New("not a group offsets file name")

// DecodeName returns the group id of a file name made by FileName. hashed is true for a
// long id's name, whose id can only be read from the file (id is then "").
func DecodeName(name string) (id string, hashed bool, err error) {
	enc, ok := strings.CutSuffix(name, fileSuffix)
	if !ok {
		return "", false, errNotGroupFile
	}
	switch {
	case enc == emptyName:
		return "", false, nil
	case strings.HasPrefix(enc, hashedPrefix):
		h := enc[len(hashedPrefix):]
		if len(h) != 2*sha256.Size || strings.ToLower(h) != h {
			return "", false, errNotGroupFile
		}
		if _, err := hex.DecodeString(h); err != nil {
			return "", false, errNotGroupFile
		}
		return "", true, nil
	}
	b := make([]byte, 0, len(enc))
	for i := 0; i < len(enc); i++ {
		switch c := enc[i]; c {
		case '^':
			if i+1 >= len(enc) || enc[i+1] < 'a' || enc[i+1] > 'z' {
				return "", false, errNotGroupFile
			}
			b = append(b, enc[i+1]-('a'-'A'))
			i++
		case '%':
			if i+2 >= len(enc) {
				return "", false, errNotGroupFile
			}
			v, err := hex.DecodeString(enc[i+1 : i+3])
			if err != nil {
				return "", false, errNotGroupFile
			}
			b = append(b, v[0])
			i += 2
		default:
			b = append(b, c)
		}
	}
	id = string(b)
	// Only the canonical spelling is a group's name: "%41" is not "^a", a name of a long
	// id spelt out is not its hashed name.
	if encodeID(id) != enc {
		return "", false, errNotGroupFile
	}
	return id, false, nil
}

// Listing is what List found in the offsets directory.
type Listing struct {
	// IDs are the group ids with a file, sorted.
	IDs []string
	// Unreadable are hashed file names (long ids) whose id could not be read from the
	// file; their groups exist but cannot be named until an operator repairs the file.
	Unreadable []string
	// Stray are names in the directory that are not group files: leftover ".tmp" files
	// of interrupted writes (each actor removes its own at load) and anything else.
	Stray []string
}

// ListGroupIDs returns the ids of every group with an offsets file in dir, sorted. It
// lists names and reads no file, except the rare file of an id longer than the name
// encoding allows (see FileName). A missing dir has no groups. Files whose id cannot be
// read are left out; List reports them.
func ListGroupIDs(fsys storage.FS, dir string) ([]string, error) {
	l, err := List(fsys, dir)
	return l.IDs, err
}

// List is ListGroupIDs with what it left out.
func List(fsys storage.FS, dir string) (Listing, error) {
	var l Listing
	names, err := fsys.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("list %s: %w", dir, err)
	}
	l.IDs = make([]string, 0, len(names))
	for _, name := range names {
		if strings.HasSuffix(name, tombSuffix) || strings.HasSuffix(name, tombSuffix+tmpSuffix) {
			continue // a deleted group's tombstone (tombstone.go)
		}
		id, hashed, err := DecodeName(name)
		switch {
		case err != nil:
			l.Stray = append(l.Stray, name)
		case hashed:
			id, err := readGroupID(fsys, filepath.Join(dir, name))
			if err != nil || FileName(id) != name {
				l.Unreadable = append(l.Unreadable, name)
				continue
			}
			l.IDs = append(l.IDs, id)
		default:
			l.IDs = append(l.IDs, id)
		}
	}
	sort.Strings(l.IDs)
	sort.Strings(l.Unreadable)
	sort.Strings(l.Stray)
	return l, nil
}
