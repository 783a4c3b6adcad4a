package conn

import (
	"fmt"
	"reflect"
	"sync"
)

// MaxStringBytes is the longest string a request may carry. Apache's generated readers
// refuse any string field longer than Short.MAX_VALUE ("string field X had invalid
// length"), compact or not, and close the connection as on any malformed request; a
// compact string of a flexible version can otherwise carry megabytes (a 1 MiB group id,
// logged and kept in memory on every event of its group).
const MaxStringBytes = 0x7fff

// LongString finds the first string field of req (a kmsg request, or any value made of
// structs, pointers, slices and strings) longer than MaxStringBytes: it returns the
// field's name and the string's length, and ok false when there is none. Byte slices
// (records, metadata, assignments) are not strings and are not looked at.
func LongString(req any) (field string, n int, ok bool) {
	return longString(reflect.ValueOf(req))
}

// checkStrings is LongString as an error for Call.Fail, naming the field and the length
// only (never the string).
func checkStrings(req any) error {
	if field, n, ok := LongString(req); ok {
		return fmt.Errorf("string field %s had invalid length %d (most %d)", field, n, MaxStringBytes)
	}
	return nil
}

func longString(v reflect.Value) (string, int, bool) {
	if !v.IsValid() {
		return "", 0, false
	}
	c := checkerFor(v.Type())
	if c == nil {
		return "", 0, false
	}
	return c(v)
}

// checker looks for a long string in a value of one type; nil for a type that holds no
// string anywhere (most of a request: partitions, offsets, records), which is skipped.
type checker func(v reflect.Value) (field string, n int, ok bool)

// checkers caches a checker per type, compiled once: a request costs one lookup.
var checkers sync.Map // reflect.Type → checker

func checkerFor(t reflect.Type) checker {
	if c, ok := checkers.Load(t); ok {
		return c.(checker)
	}
	c := compile(t, map[reflect.Type]*checker{})
	checkers.Store(t, c)
	return c
}

// compile makes t's checker; building holds the types being compiled, so a recursive
// type refers to its own checker through a pointer.
func compile(t reflect.Type, building map[reflect.Type]*checker) checker {
	if p, ok := building[t]; ok {
		return func(v reflect.Value) (string, int, bool) { return (*p)(v) }
	}
	if !hasStrings(t) {
		return nil
	}
	self := new(checker)
	building[t] = self
	defer delete(building, t)
	switch t.Kind() {
	case reflect.String:
		*self = func(v reflect.Value) (string, int, bool) {
			if n := v.Len(); n > MaxStringBytes {
				return "", n, true
			}
			return "", 0, false
		}
	case reflect.Pointer, reflect.Interface:
		var elem checker
		if t.Kind() == reflect.Pointer {
			elem = compile(t.Elem(), building)
		}
		*self = func(v reflect.Value) (string, int, bool) {
			if v.IsNil() {
				return "", 0, false
			}
			if elem == nil {
				return longString(v.Elem()) // an interface: its dynamic type
			}
			return elem(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		elem := compile(t.Elem(), building)
		*self = func(v reflect.Value) (string, int, bool) {
			for i := range v.Len() {
				if f, n, ok := elem(v.Index(i)); ok {
					return f, n, ok
				}
			}
			return "", 0, false
		}
	case reflect.Struct:
		type field struct {
			i    int
			name string
			c    checker
		}
		var fields []field
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			if c := compile(f.Type, building); c != nil {
				fields = append(fields, field{i, f.Name, c})
			}
		}
		*self = func(v reflect.Value) (string, int, bool) {
			for _, f := range fields {
				if name, n, ok := f.c(v.Field(f.i)); ok {
					if name == "" {
						name = f.name
					}
					return name, n, ok
				}
			}
			return "", 0, false
		}
	default:
		return nil
	}
	return *self
}

var typeHasStrings sync.Map // reflect.Type → bool

func hasStrings(t reflect.Type) bool {
	if v, ok := typeHasStrings.Load(t); ok {
		return v.(bool)
	}
	has := hasStringsSeen(t, map[reflect.Type]bool{})
	typeHasStrings.Store(t, has)
	return has
}

func hasStringsSeen(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return false // []byte
		}
		return hasStringsSeen(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && hasStringsSeen(f.Type, seen) {
				return true
			}
		}
	}
	return false
}
