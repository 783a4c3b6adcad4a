package logs

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"unicode/utf8"
)

// MaxIDBytes is how much of a client-supplied id (group, member, instance, client id,
// a JoinGroup reason) a log field carries. The protocol allows 32,767 bytes, and a
// compact string in a flexible request allows more; logged whole on every event they
// make lines of megabytes.
const MaxIDBytes = 256

// ID is s for a log field: s itself when it is at most MaxIDBytes long, otherwise its
// first MaxIDBytes (cut at a UTF-8 boundary) followed by its length and the start of its
// SHA-256, so two long ids with the same prefix still read apart:
//
//	"aaaa…aaaa…(1048576 bytes, sha256 3f2c9a1b0d4e)"
func ID(s string) string {
	if len(s) <= MaxIDBytes {
		return s
	}
	cut := MaxIDBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(s))
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes, sha256 " + hex.EncodeToString(sum[:6]) + ")"
}

// MaxIDs bounds how many ids one log field lists (IDs); the count is logged beside.
const MaxIDs = 20

// IDs is ids for a log field: at most MaxIDs of them, each bounded by ID.
func IDs(ids []string) []string {
	out := make([]string, 0, min(len(ids), MaxIDs))
	for _, s := range ids[:min(len(ids), MaxIDs)] {
		out = append(out, ID(s))
	}
	return out
}
