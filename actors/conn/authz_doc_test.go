package conn

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// renderAuthzTable is AuthzTable as docs/security.md shows it.
func renderAuthzTable() string {
	var b strings.Builder
	b.WriteString("| Key | API | Checks, in order | Denied |\n|---|---|---|---|\n")
	for _, r := range AuthzTable() {
		fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", r.Key, r.API, r.Checks, r.Denied)
	}
	return b.String()
}

// TestSecurityDocShowsTheAuthzTable keeps docs/security.md's table the one the code
// enforces (and the wire tests drive).
func TestSecurityDocShowsTheAuthzTable(t *testing.T) {
	raw, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- authz-table: generated from actors/conn AuthzTable -->\n", "<!-- /authz-table -->"
	doc := string(raw)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/security.md lacks the %q ... %q block", begin, end)
	}
	if got, want := doc[i+len(begin):j], renderAuthzTable(); got != want {
		t.Fatalf("docs/security.md's table differs from AuthzTable; it should read:\n%s", want)
	}
}

// Every API with a handler either has a row or needs no right.
func TestEveryAPIIsInTheAuthzTable(t *testing.T) {
	free := map[int16]bool{apiVersionsKey: true, saslHandshakeKey: true, saslAuthenticateKey: true, panicKey: true}
	rows := map[int16]bool{}
	for _, r := range AuthzTable() {
		rows[r.Key] = true
	}
	for key := range apis {
		if key >= 0 && !rows[key] && !free[key] {
			t.Errorf("API %d has no row in AuthzTable", key)
		}
	}
}
