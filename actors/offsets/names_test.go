package offsets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kaas/storage"
)

// nameCases are the group ids the file-name rules must survive.
var nameCases = []string{
	"", "g", "my-group", "My-Group", "MY-GROUP", "my-group.v2", "under_score",
	".", "..", "...", ".hidden", "../x", "../../etc/passwd", "a/b", `a\b`, "/abs", "x/..",
	"nul\x00byte", "\x00", "tab\tand\nnewline", "space in id", "%41", "^a", "~", "~h",
	"a.json", "a.json.tmp", "CON", "prn.txt", "émoji 🎉", "日本語", "\xff\xfe invalid utf8",
	strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("A", 64), strings.Repeat("A", 65),
	strings.Repeat("x", 300), strings.Repeat("é", 150), strings.Repeat("/", 300),
}

func TestFileNameRoundTrip(t *testing.T) {
	seen := map[string]string{}
	seenFold := map[string]string{}
	for _, id := range nameCases {
		name := FileName(id)
		if prev, dup := seen[name]; dup {
			t.Fatalf("ids %q and %q share file name %q", prev, id, name)
		}
		seen[name] = id
		// A case-insensitive volume must not merge two ids either.
		if prev, dup := seenFold[strings.ToLower(name)]; dup {
			t.Fatalf("ids %q and %q share file name %q ignoring case", prev, id, name)
		}
		seenFold[strings.ToLower(name)] = id
		if len(name)+len(tmpSuffix) > 143 {
			t.Errorf("FileName(%q) is %d bytes with its tmp suffix, over eCryptfs' 143", id, len(name)+len(tmpSuffix))
		}
		if strings.ContainsAny(name, "/\\\x00") || name == "." || name == ".." || strings.HasPrefix(name, ".") {
			t.Errorf("FileName(%q) = %q is not a safe plain name", id, name)
		}
		if filepath.Base(name) != name || !filepath.IsLocal(name) {
			t.Errorf("FileName(%q) = %q is not local", id, name)
		}
		got, hashed, err := DecodeName(name)
		if err != nil {
			t.Errorf("DecodeName(FileName(%q) = %q): %v", id, name, err)
			continue
		}
		if hashed {
			if len(encodeIDSpelled(id)) <= maxEncodedLen {
				t.Errorf("FileName(%q) hashed a short id", id)
			}
			continue
		}
		if got != id {
			t.Errorf("DecodeName(FileName(%q)) = %q", id, got)
		}
	}
}

// encodeIDSpelled is the escaped spelling without the length limit.
func encodeIDSpelled(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		case c >= 'A' && c <= 'Z':
			b.WriteString("^x")
		default:
			b.WriteString("%xx")
		}
	}
	return b.String()
}

func TestDecodeNameRejectsNonCanonical(t *testing.T) {
	for _, name := range []string{
		"x.json.tmp", "x.txt", "%41.json", "%2F.json", "a%2.json", "a%zz.json", "^A.json", "^.json",
		"A.json", ".hidden.json", "a/b.json", "~" + strings.Repeat("0", 63) + ".json",
		"~" + strings.Repeat("A", 64) + ".json", strings.Repeat("a", 129) + ".json", ".json",
	} {
		if id, hashed, err := DecodeName(name); err == nil {
			t.Errorf("DecodeName(%q) = %q, %v; want an error", name, id, hashed)
		}
	}
}

func FuzzFileName(f *testing.F) {
	for _, id := range nameCases {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name := FileName(id)
		if !filepath.IsLocal(name) || filepath.Base(name) != name || strings.HasPrefix(name, ".") {
			t.Fatalf("FileName(%q) = %q is not a plain local name", id, name)
		}
		got, hashed, err := DecodeName(name)
		if err != nil || (!hashed && got != id) {
			t.Fatalf("DecodeName(FileName(%q)) = %q, %v, %v", id, got, hashed, err)
		}
	})
}

func TestListGroupIDs(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("long-id/", 40)
	ids := []string{"", "a/b", "..", "Group", long}
	for _, id := range ids {
		b, err := encodeFile(id, newState())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, FileName(id)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A leftover tmp file, a stranger, and a long id's file that lost its content.
	must(t, os.WriteFile(filepath.Join(dir, FileName("x")+tmpSuffix), []byte("{"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "README"), nil, 0o644))
	broken := FileName(strings.Repeat("z", 200))
	must(t, os.WriteFile(filepath.Join(dir, broken), []byte("garbage"), 0o644))

	l, err := List(storage.OSFS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "..", "Group", "a/b", long}
	if strings.Join(l.IDs, "|") != strings.Join(want, "|") {
		t.Errorf("IDs = %q, want %q", l.IDs, want)
	}
	if len(l.Unreadable) != 1 || l.Unreadable[0] != broken {
		t.Errorf("Unreadable = %q, want [%q]", l.Unreadable, broken)
	}
	if len(l.Stray) != 2 {
		t.Errorf("Stray = %q, want the tmp file and README", l.Stray)
	}
	got, err := ListGroupIDs(storage.OSFS{}, filepath.Join(dir, "missing"))
	if err != nil || len(got) != 0 {
		t.Errorf("ListGroupIDs(missing dir) = %q, %v; want none", got, err)
	}
	f := storage.NewFaultFS(nil)
	f.FailNext(storage.OpReadDir, nil)
	if _, err := ListGroupIDs(f, dir); err == nil {
		t.Error("ListGroupIDs with a failing directory read: no error")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
