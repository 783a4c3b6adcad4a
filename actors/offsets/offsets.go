package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// Wire codes of the actor's own failures, in one table (the group actor passes them on).
var (
	// codeWriteFailed answers every request of a batch whose write failed. Apache maps a
	// storage error on the offsets log to NOT_COORDINATOR for OffsetCommit
	// (GroupMetadataManager.maybeConvertOffsetCommitError: KAFKA_STORAGE_ERROR → 16; 4.0's
	// CoordinatorOperationExceptionHelper does the same for every write). Clients treat it
	// as retriable: they look the coordinator up again and retry the commit.
	codeWriteFailed = kerr.NotCoordinator.Code
	// codeBroken answers everything while the group's file is corrupt or unreadable. It
	// is retriable, so consumers wait and keep their positions instead of resetting them
	// as an empty offsets map (or OFFSET_OUT_OF_RANGE-like guesses) would make them do.
	codeBroken = kerr.CoordinatorNotAvailable.Code
	// codeCrashed answers the requests of an incarnation that panicked.
	codeCrashed = kerr.CoordinatorNotAvailable.Code
)

// DefaultMaxMetadataBytes is Apache's offset.metadata.max.bytes.
const DefaultMaxMetadataBytes = 4096

// Dir is the offsets directory under the broker's data.dir.
func Dir(dataDir string) string {
	return filepath.Join(dataDir, "__cluster", "__consumer_offsets")
}

// Config is everything one group's offsets actor needs.
type Config struct {
	// Group is the group id, any string (FileName makes it safe).
	Group string
	// Dir is the offsets directory, Dir(data.dir).
	Dir string
	// FS does the file access; nil is OSFS.
	FS FS
	// Log is the broker logger; the actor adds the group and file.
	Log zerolog.Logger
	// MaxMetadataBytes is offset.metadata.max.bytes, in UTF-16 units as Apache counts;
	// 0 is DefaultMaxMetadataBytes.
	MaxMetadataBytes int
	// Metrics is shared by every group's actor; nil records nothing.
	Metrics *Metrics
	// Now stamps commits; nil is time.Now.
	Now func() time.Time
	// RetryLoadAfter is how long a group whose file failed to load waits before it reads
	// the file again (so an operator's repair is picked up without a restart); 0 is 5 s.
	RetryLoadAfter time.Duration
}

func (c Config) withDefaults() Config {
	if c.FS == nil {
		c.FS = OSFS{}
	}
	if c.MaxMetadataBytes == 0 {
		c.MaxMetadataBytes = DefaultMaxMetadataBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RetryLoadAfter == 0 {
		c.RetryLoadAfter = 5 * time.Second
	}
	return c
}

// Props makes the offsets actor of cfg.Group. Its parent (the group actor) should stop it
// with Poison, not Stop: protoactor drops the user messages still in a stopped actor's
// mailbox, and with them their promises; after Poison everything sent before is answered.
func Props(cfg Config) *actor.Props {
	cfg = cfg.withDefaults()
	return actor.PropsOf(func() actor.Actor { return newOffsetsActor(cfg) })
}

// offsetsActor owns one group's file. It loads the file on its first request and keeps
// the durable state in memory; requests that change it queue, and a flushNow message
// the actor sends itself writes them all at once.
//
// Group commit: the first request to queue sends flushNow to self. Everything already in
// the mailbox is ahead of it, so it joins the same write; while that write blocks Receive
// (tmp + fsync + rename + directory fsync), new requests pile up in the mailbox and all go
// into the next write. One write is in flight per group, every waiter is answered right
// after the write that holds its request, and the state is touched only in Receive. The
// alternative, writing in a goroutine, would let Fetch run during a write but would need
// a second copy of the state and a join on stop; a write is about a millisecond, so the
// actor blocks instead (the one place in kaas a Receive blocks).
type offsetsActor struct {
	cfg  Config
	name string // file name in cfg.Dir
	path string
	log  zerolog.Logger

	loaded   bool
	broken   error // the load failed; every request answers codeBroken
	brokenAt time.Time
	dirReady bool
	exists   bool  // the file exists on disk
	st       state // what the file holds
	metaJSON metaCache

	queue       []queued
	flushQueued bool
}

// queued is a request waiting for the next write.
type queued struct {
	msg   any
	codes []int16 // a Commit's per-entry codes found before the write (OFFSET_METADATA_TOO_LARGE)
}

// flushNow tells the actor to write what has queued.
type flushNow struct{}

func newOffsetsActor(cfg Config) *offsetsActor {
	name := FileName(cfg.Group)
	return &offsetsActor{
		cfg:  cfg,
		name: name,
		path: filepath.Join(cfg.Dir, name),
		log:  cfg.Log.With().Str("group", cfg.Group).Str("file", name).Logger(),
		st:   newState(),
	}
}

func (a *offsetsActor) Receive(ctx actor.Context) {
	msg := ctx.Message()
	switch m := msg.(type) {
	case *actor.Started:
	case *actor.Stopping:
		a.onStopping()
	case *actor.Restarting:
		a.onRestarting()
	case *Commit:
		defer a.answerOnPanic(m)
		a.handleCommit(ctx, m)
	case *Fetch:
		defer a.answerOnPanic(m)
		a.handleFetch(m)
	case *Stat:
		defer a.answerOnPanic(m)
		a.handleStat(m)
	case *Delete, *DeleteAll, *DropTopics, *SaveMeta, *Expire:
		defer a.answerOnPanic(m)
		a.handleChange(ctx, m)
	case *flushNow:
		a.onFlush()
	case *Flush:
		a.flush()
		m.Reply.Resolve(&Result{})
	}
}

// ready loads the file on first use and says whether the group can be served.
func (a *offsetsActor) ready() bool {
	if a.broken != nil && a.cfg.Now().Sub(a.brokenAt) >= a.cfg.RetryLoadAfter {
		a.loaded = false
	}
	if !a.loaded {
		a.load()
	}
	return a.broken == nil
}

// load reads the file. A missing file is an empty group; a file that cannot be read or
// understood, or holds another group, puts the actor in broken mode: it is neither
// deleted nor overwritten, and every request answers COORDINATOR_NOT_AVAILABLE until a
// later load (after RetryLoadAfter) succeeds.
func (a *offsetsActor) load() {
	a.loaded = true
	// A leftover tmp file is a write that was cut short; the file itself is intact.
	if err := a.cfg.FS.Remove(a.path + tmpSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		a.log.Warn().Err(err).Msg("offsets_tmp_cleanup_failed")
	}
	wasBroken := a.broken != nil
	b, err := a.cfg.FS.ReadFile(a.path)
	var reason string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		a.st, a.exists, a.broken = newState(), false, nil
	case err != nil:
		reason, a.broken = "unreadable", fmt.Errorf("read %s: %w", a.path, err)
	default:
		id, st, derr := decodeFile(b)
		switch {
		case derr != nil:
			reason, a.broken = "corrupt", fmt.Errorf("%s: %w", a.path, derr)
		case id != a.cfg.Group:
			reason, a.broken = "corrupt", fmt.Errorf("%s: holds group %q", a.path, id)
		default:
			a.st, a.exists, a.broken = st, true, nil
		}
	}
	if a.broken != nil {
		a.brokenAt = a.cfg.Now()
		if !wasBroken {
			// Once per incarnation: the group keeps answering COORDINATOR_NOT_AVAILABLE
			// and the metric counts it; the retries are not logged again.
			a.cfg.Metrics.loadFailed(reason)
			a.log.Error().Err(a.broken).Str("reason", reason).
				Msg("offsets_file_unusable_group_unavailable_until_repaired")
		}
		return
	}
	if wasBroken {
		a.log.Info().Int("offsets", len(a.st.offsets)).Msg("offsets_file_loaded_after_repair")
	}
}

func (a *offsetsActor) handleCommit(ctx actor.Context, m *Commit) {
	if !a.ready() {
		fail(queued{msg: m}, codeBroken)
		return
	}
	codes := make([]int16, len(m.Entries))
	valid := 0
	for i, e := range m.Entries {
		// Apache compares String.length(), UTF-16 units, not bytes
		// (GroupMetadataManager.validateOffsetMetadataLength).
		if utf16Len(e.Metadata) > a.cfg.MaxMetadataBytes {
			codes[i] = kerr.OffsetMetadataTooLarge.Code
			continue
		}
		valid++
	}
	if valid == 0 {
		// Nothing to store: Apache writes nothing when every partition is oversized.
		m.Reply.Resolve(&CommitResult{Codes: codes})
		return
	}
	a.enqueue(ctx, queued{msg: m, codes: codes})
}

func (a *offsetsActor) handleFetch(m *Fetch) {
	if !a.ready() {
		m.Reply.Resolve(&FetchResult{ErrorCode: codeBroken})
		return
	}
	// Only what is on disk is visible: queued commits are not acknowledged yet, and the
	// pending (transactional) layer never is.
	res := &FetchResult{}
	if m.Partitions == nil {
		res.Offsets = make(map[TopicPartition]Committed, len(a.st.offsets))
		for tp, o := range a.st.offsets {
			res.Offsets[tp] = o
		}
	} else {
		res.Offsets = make(map[TopicPartition]Committed, len(m.Partitions))
		for _, tp := range m.Partitions {
			if o, ok := a.st.offsets[tp]; ok {
				res.Offsets[tp] = o
			}
		}
	}
	m.Reply.Resolve(res)
}

func (a *offsetsActor) handleStat(m *Stat) {
	if !a.ready() {
		m.Reply.Resolve(&Status{ErrorCode: codeBroken})
		return
	}
	m.Reply.Resolve(a.status())
}

func (a *offsetsActor) status() *Status {
	return &Status{Exists: a.exists, Meta: a.st.meta, Count: len(a.st.offsets)}
}

func (a *offsetsActor) handleChange(ctx actor.Context, m any) {
	if !a.ready() {
		fail(queued{msg: m}, codeBroken)
		return
	}
	// A SaveMeta without a reply waits for no write: it takes effect at once, unless
	// changes queued before it (a DeleteAll) must be applied first.
	if sm, ok := m.(*SaveMeta); ok && !sm.Reply.Valid() && len(a.queue) == 0 {
		a.st.meta = sm.Meta
		return
	}
	a.enqueue(ctx, queued{msg: m})
}

func (a *offsetsActor) enqueue(ctx actor.Context, q queued) {
	a.queue = append(a.queue, q)
	if !a.flushQueued {
		a.flushQueued = true
		ctx.Send(ctx.Self(), &flushNow{})
	}
}

func (a *offsetsActor) onFlush() {
	a.flushQueued = false
	a.flush()
}

// flush applies the queue to a copy of the state, makes the copy durable with one write,
// then answers every request of the batch. On a failed write the state stays as it was
// and every request gets codeWriteFailed: never a false success.
func (a *offsetsActor) flush() {
	if len(a.queue) == 0 {
		return
	}
	batch := a.queue
	next := a.st.clone()
	exists := a.exists
	now := a.cfg.Now()
	results := make([]any, len(batch))
	dirty := false
	expired := 0
	for i, q := range batch {
		var changed bool
		var n int
		results[i], changed, n = apply(&next, &exists, q, now)
		dirty = dirty || changed
		expired += n
	}
	var err error
	if dirty {
		start := time.Now()
		err = a.persist(next, exists)
		a.cfg.Metrics.wrote(err, time.Since(start), len(batch))
	}
	if err != nil {
		a.log.Error().Err(err).Int("requests", len(batch)).Msg("offsets_write_failed")
		for _, q := range batch {
			fail(q, codeWriteFailed)
			// A SaveMeta without a reply has no one to tell: keep its meta in memory for
			// the next write, as if it had arrived after this batch.
			if sm, ok := q.msg.(*SaveMeta); ok && !sm.Reply.Valid() {
				a.st.meta = sm.Meta
			}
		}
		a.queue = nil
		return
	}
	a.st, a.exists = next, exists
	a.cfg.Metrics.expiredOffsets(expired)
	if expired > 0 {
		a.log.Info().Int("expired", expired).Bool("file_removed", !exists).Msg("offsets_expired")
	}
	for i, q := range batch {
		resolve(q.msg, results[i])
	}
	a.queue = nil
}

// persist writes the state, or removes the file of a group that no longer has one.
func (a *offsetsActor) persist(s state, exists bool) error {
	if !exists {
		return removeFileDurably(a.cfg.FS, a.cfg.Dir, a.name)
	}
	if !a.dirReady {
		if err := a.cfg.FS.MkdirAll(a.cfg.Dir); err != nil {
			return fmt.Errorf("create %s: %w", a.cfg.Dir, err)
		}
		// The directory's own entry in its parent must be durable too, once.
		if err := a.cfg.FS.SyncDir(filepath.Dir(a.cfg.Dir)); err != nil {
			return fmt.Errorf("fsync directory %s: %w", filepath.Dir(a.cfg.Dir), err)
		}
		a.dirReady = true
	}
	meta, err := a.metaJSON.encode(s.meta)
	if err != nil {
		return fmt.Errorf("encode meta of group %q: %w", a.cfg.Group, err)
	}
	data, err := encodeFileWith(a.cfg.Group, s, meta)
	if err != nil {
		return err
	}
	return writeFileAtomic(a.cfg.FS, a.cfg.Dir, a.name, data)
}

// apply makes one queued request's change to s and returns what its waiter gets if the
// write succeeds, whether it changed anything on disk, and how many offsets it expired.
func apply(s *state, exists *bool, q queued, now time.Time) (result any, changed bool, expired int) {
	switch m := q.msg.(type) {
	case *Commit:
		nowMs := now.UnixMilli()
		for i, e := range m.Entries {
			if q.codes[i] != 0 {
				continue
			}
			c := e.Committed
			if c.CommitTime == 0 {
				c.CommitTime = nowMs
			}
			s.offsets[e.TopicPartition] = c
		}
		*exists = true
		return &CommitResult{Codes: q.codes}, true, 0
	case *Delete:
		for _, tp := range m.Partitions {
			if _, ok := s.offsets[tp]; ok {
				delete(s.offsets, tp)
				changed = true
			}
		}
		return &Result{}, changed, 0
	case *DropTopics:
		drop := make(map[string]bool, len(m.Topics))
		for _, t := range m.Topics {
			drop[t] = true
		}
		for tp := range s.offsets {
			if drop[tp.Topic] {
				delete(s.offsets, tp)
				changed = true
			}
		}
		return &Result{}, changed, 0
	case *DeleteAll:
		changed = *exists
		*s, *exists = newState(), false
		return &Result{}, changed, 0
	case *SaveMeta:
		s.meta = m.Meta
		if !m.Reply.Valid() {
			// Written with the next rewrite, if any.
			return nil, false, 0
		}
		*exists = true
		return &Result{}, true, 0
	case *Expire:
		skip := map[TopicPartition]bool{}
		for _, p := range s.pending {
			for tp := range p {
				skip[tp] = true
			}
		}
		gone := expiredOffsets(s.offsets, s.meta, m.Rule, m.Now, skip)
		for _, tp := range gone {
			delete(s.offsets, tp)
		}
		changed = len(gone) > 0
		// An Empty group left with no offsets is dead and removed (Apache 4.0 writes its
		// group tombstone: GroupCoordinatorShard.cleanupGroupMetadata).
		if m.Rule.Empty && len(s.offsets) == 0 && len(s.pending) == 0 && *exists {
			*s, *exists = newState(), false
			changed = true
		}
		return &Status{Exists: *exists, Meta: s.meta, Count: len(s.offsets)}, changed, len(gone)
	}
	return nil, false, 0
}

func resolve(msg any, v any) {
	if v == nil {
		return
	}
	switch m := msg.(type) {
	case *Commit:
		m.Reply.Resolve(v)
	case *Delete:
		m.Reply.Resolve(v)
	case *DropTopics:
		m.Reply.Resolve(v)
	case *DeleteAll:
		m.Reply.Resolve(v)
	case *SaveMeta:
		m.Reply.Resolve(v)
	case *Expire:
		m.Reply.Resolve(v)
	}
}

// fail answers a request with code (a Commit keeps the codes found before the write).
func fail(q queued, code int16) {
	switch m := q.msg.(type) {
	case *Commit:
		codes := make([]int16, len(m.Entries))
		for i := range codes {
			if q.codes != nil && q.codes[i] != 0 {
				codes[i] = q.codes[i]
			} else {
				codes[i] = code
			}
		}
		m.Reply.Resolve(&CommitResult{Codes: codes})
	case *Fetch:
		m.Reply.Resolve(&FetchResult{ErrorCode: code})
	case *Stat:
		m.Reply.Resolve(&Status{ErrorCode: code})
	case *Expire:
		m.Reply.Resolve(&Status{ErrorCode: code})
	case *Delete:
		m.Reply.Resolve(&Result{ErrorCode: code})
	case *DropTopics:
		m.Reply.Resolve(&Result{ErrorCode: code})
	case *DeleteAll:
		m.Reply.Resolve(&Result{ErrorCode: code})
	case *SaveMeta:
		m.Reply.Resolve(&Result{ErrorCode: code})
	}
}

// onStopping writes what has queued, so that a passivated or stopped group answers
// every request it accepted (with success or the write's error code).
func (a *offsetsActor) onStopping() {
	a.flush()
}

// onRestarting answers the queue of the failed incarnation without writing: its state
// may be what made it panic. The next incarnation reloads the file.
func (a *offsetsActor) onRestarting() {
	for _, q := range a.queue {
		fail(q, codeCrashed)
	}
	a.queue = nil
}

// answerOnPanic answers the request being handled when the handler panics, then lets
// the panic go on to the supervisor (which restarts the actor). A request already queued
// is left to onRestarting.
func (a *offsetsActor) answerOnPanic(msg any) {
	r := recover()
	if r == nil {
		return
	}
	a.log.Error().Interface("panic", r).Bytes("stack", debug.Stack()).Msg("offsets_actor_panic")
	if n := len(a.queue); n == 0 || a.queue[n-1].msg != msg {
		fail(queued{msg: msg}, codeCrashed)
	}
	panic(r)
}

// utf16Len is the length of s as Java's String.length() counts it.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}
