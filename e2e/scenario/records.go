package scenario

import (
	"fmt"
	"strconv"
	"strings"
)

// Key and Value of record i. The value repeats the index so a consumer can prove which
// record it got and that key and value travelled together.
func Key(i int) []byte   { return fmt.Appendf(nil, "k-%05d", i) }
func Value(i int) []byte { return fmt.Appendf(nil, "v-%05d", i) }

// Index parses the record index from a key and value written by Key and Value.
func Index(key, value []byte) (int, error) {
	k, v := string(key), string(value)
	if !strings.HasPrefix(v, "v-") || k != "k-"+v[2:] {
		return 0, fmt.Errorf("record key %q does not match value %q", k, v)
	}
	i, err := strconv.Atoi(v[2:])
	if err != nil {
		return 0, fmt.Errorf("record value %q: %w", v, err)
	}
	return i, nil
}
