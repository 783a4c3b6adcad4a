package logs

import "github.com/rs/zerolog"

// Tagged is a logger that adds its fields (one or two key/value pairs) to each event as
// the event is made. It stands in for a zerolog child logger where an actor lives in the
// hundreds of thousands: a child logger keeps a 500-byte context buffer of its own for
// the actor's whole life, while most groups never log a line. Events of a disabled level
// cost what they cost on the base logger: nothing is built.
type Tagged struct {
	L          *zerolog.Logger
	Key, Val   string
	Key2, Val2 string // optional second field; none when Key2 is empty
}

// Tag is the logger l adding key=val to every event.
func Tag(l *zerolog.Logger, key, val string) Tagged {
	return Tagged{L: l, Key: key, Val: val}
}

// And adds a second field.
func (t Tagged) And(key, val string) Tagged {
	t.Key2, t.Val2 = key, val
	return t
}

func (t Tagged) tag(e *zerolog.Event) *zerolog.Event {
	if e == nil {
		return nil
	}
	e = e.Str(t.Key, t.Val)
	if t.Key2 != "" {
		e = e.Str(t.Key2, t.Val2)
	}
	return e
}

// Debug, Info, Warn and Error start an event at their level with the fields set.
func (t Tagged) Debug() *zerolog.Event { return t.tag(t.L.Debug()) }
func (t Tagged) Info() *zerolog.Event  { return t.tag(t.L.Info()) }
func (t Tagged) Warn() *zerolog.Event  { return t.tag(t.L.Warn()) }
func (t Tagged) Error() *zerolog.Event { return t.tag(t.L.Error()) }
