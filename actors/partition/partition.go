package partition

import (
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/metrics"
	"kaas/storage"
)

// Special ListOffsets timestamps (KIP-79, KIP-734, KIP-405).
const (
	latestTimestamp        = -1
	earliestTimestamp      = -2
	maxTimestamp           = -3
	earliestLocalTimestamp = -4
	latestTieredTimestamp  = -5
)

// PartitionConfig is everything one partition actor needs.
type PartitionConfig struct {
	Dir       string
	Topic     string
	Partition int32
	// LeaderEpoch is the catalogue's epoch of the partition: the least the actor leads at.
	// The epoch it leads at is the newest of it, the leader-epoch file's and the batches'
	// (epochs.go), one more in a cluster when the partition moved to this broker.
	LeaderEpoch int32
	// NodeID is this broker (cluster): written into the partition's lock and its
	// leader-epoch file.
	NodeID int32

	SegmentBytes   int64
	RetentionMS    int64 // <0: forever
	RetentionBytes int64 // <0: no limit
	// FlushMessages is log.flush.interval.messages: 1 makes every acknowledged produce
	// durable first (appends queued behind an fsync share the next one); N>1
	// acknowledges at once and fsyncs every N batches in the background.
	FlushMessages  int64
	RetentionCheck time.Duration
	// Timing is segment.ms, segment.jitter.ms and flush.ms (timeroll.go).
	Timing Timing
	// Cleaner, when the topic's cleanup.policy holds compact, compacts the log
	// (cleaner.go); nil: delete only.
	Cleaner   *CleanerConfig
	IdleClose time.Duration
	Now       func() time.Time
	Log       zerolog.Logger
	Metrics   *Metrics
	// FS does every file step of the partition: its segments, recovery point,
	// leader-epoch file and leader.lock. Nil is storage.OSFS.
	FS storage.FS
	// Gate, in a cluster, reports whether this broker may still write the partition: its
	// lease is held and has not been lost since the partition was started. Checked
	// before every append and again before every acknowledgement. Nil: always.
	Gate func() bool
	// Lapsed (cluster) reports whether a broker's lease has lapsed, as the fence sees it.
	// A new leader whose partition lock is held by a broker whose lease lapsed (a paused
	// process keeps its locks) breaks the lock instead of waiting for it: the new epoch
	// it begins keeps the paused leader's late writes out of the log. Nil: never.
	Lapsed func(id int32) bool
	// ProducerExpiration is producer.id.expiration.ms: a producer without an open
	// transaction idle this long is forgotten (producerstate.go); 0: never.
	// ProducerExpiryCheck is how often that is looked for (0: 10 minutes).
	ProducerExpiration  time.Duration
	ProducerExpiryCheck time.Duration
	// MaxProducers is producer.state.max.entries: a new producer past it evicts the
	// longest idle one without an open transaction; 0: no bound.
	MaxProducers int
	// Txns, when set, is the transaction coordinator the orphan check asks about the
	// transactions recovery found open (orphans.go).
	Txns *TxnChecker
}

// pendingAck is a produce written but not yet durable.
type pendingAck struct {
	end    int64
	resp   any // *Produced, or *TxnMarkerWritten for a marker
	reply  actor.Promise
	marker bool
}

// fail answers a waiter whose write did not become durable (code: why).
func (w *pendingAck) fail(code int16) {
	if w.marker {
		w.reply.Resolve(&TxnMarkerWritten{ErrorCode: code})
		return
	}
	w.reply.Resolve(&Produced{ErrorCode: code, BaseOffset: -1, LogStartOffset: -1})
}

type partitionActor struct {
	cfg PartitionConfig
	// current is the config the next incarnation starts with: the topic's configs as
	// last given (reconfigure), so a restart after a panic keeps them. Only this
	// actor's incarnations touch it, one at a time.
	current *PartitionConfig
	log     zerolog.Logger
	// leaderLock (cluster) is the partition's flock, held while this actor leads it;
	// lockWaitSince is when it started waiting for another process to let it go (zero:
	// not waiting), lockCancel the retry's timer.
	leaderLock    storage.RWFile
	lockWaitSince time.Time
	lockCancel    actor.Cancel
	// epoch is the leader epoch this actor leads at: stamped on every batch it appends,
	// and the one clients' current_leader_epoch is checked against.
	epoch int32
	// gateClosed: fenced was seen (logged once).
	gateClosed bool

	disk      *segmentLog // the segments; nil until open (p.log is the logger)
	producers producers
	// openTxns counts the producers with an open transaction; completing are the
	// transactions whose marker is written but not yet durable (txn.go).
	openTxns   int
	completing []completingTxn
	durable    int64 // every offset below is on disk
	syncing    bool
	// syncAsked: a syncNow is in the mailbox (requestSync); the writes the mailbox
	// holds before it are appended first and share its fsync.
	syncAsked bool
	unsynced  int64
	pending   []pendingAck
	// roll is the segment roll in flight (roll.go); rollQueue the produces that wait
	// for it, in the order they came.
	roll      *rollJob
	rollQueue []*appendBatch
	// lookups are the ListOffsets-by-time reads running off the turn (timeplan.go).
	lookups map[*listOffset]struct{}
	// synced is where the last good fsync of the active segment reached; repair says an
	// fsync failed since, so the next one rewrites from there first (repair.go).
	synced   syncedTo
	repair   bool
	watchers map[uint64]watch
	broken   error           // set when the log could not be opened
	end      *metrics.LogEnd // the high watermark as kaas_log_end_offset publishes it

	stopRetention actor.Cancel
	// openRetryIn is the wait before the next try of a log that could not be opened,
	// doubling up to openRetryMax; openCancel that try's timer.
	openRetryIn time.Duration
	openCancel  actor.Cancel
	// parked are the produces held while the lock is awaited (park.go).
	parked      []parkedAppend
	parkedBytes int
	// deletes are the DeleteRecords waiting for the log start offset's file
	// (deleterecords.go).
	deletes deletes
	// cleaning is the compaction pass in flight (cleaner.go); cleanedTo is where the
	// last one's key map ended: the next maps from there (the dirty range).
	cleaning  *cleaning
	cleanedTo int64
	cleanerMt *metrics.CleanerPartition // its dirty ratio and last pass (cleanermetrics.go)
	// clock judges segment.ms rolls of the active segment; flushCancel is the flush.ms
	// timer (timeroll.go).
	clock       rollClock
	flushCancel actor.Cancel
	// producerMt publishes the producer-state entries and LSO lag; stopExpiry is the
	// producer expiry's timer (producerstate.go).
	producerMt *metrics.PartitionProducers
	stopExpiry actor.Cancel
	// The orphan check's questions in flight, its retry timer and backoff (orphans.go).
	orphanAsks    map[uint64]orphanAsk
	orphanTimer   actor.Cancel
	orphanGen     uint64
	orphanBackoff time.Duration
}

// PartitionProps makes the props of one partition actor.
func PartitionProps(cfg PartitionConfig) *actor.Props {
	cur := &cfg
	return actor.PropsOf(func() actor.Actor { return &partitionActor{cfg: *cur, current: cur} })
}

// Receive: lifecycle, then requests, then events. A panic answers the request the turn
// holds with NOT_LEADER_OR_FOLLOWER (the actor layer: AnswerCrash) and the manager
// restarts the actor; an append already waiting for its fsync is handed on
// (actor.HandedOn) and answered by Restarting, or by Stopping with its outcome.
func (p *partitionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.onStarted(ctx)
	case *actor.Stopping:
		p.onStopping(ctx)
	case *actor.Restarting:
		p.onRestarting(ctx)
	case *actor.ReceiveTimeout:
		p.onIdle(ctx)
	case *appendBatch:
		p.handleAppend(ctx, m)
	case *reconfigure:
		p.onReconfigure(ctx, m)
	case *flushTick:
		p.onFlushTick(ctx)
	case *readLog:
		m.reply.Resolve(p.read(ctx, m))
	case *watch:
		p.handleWatch(ctx, m)
	case *unwatch:
		delete(p.watchers, m.id)
	case *listOffset:
		if out := p.listOffset(ctx, m); out != nil {
			m.reply.Resolve(out)
		}
	case *listedByTime:
		p.onListedByTime(m)
	case *describeProducers:
		m.reply.Resolve(p.describeProducers())
	case *epochEndOf:
		m.reply.Resolve(p.epochEnd(m))
	case *logSize:
		m.reply.Resolve(p.logSize())
	case *deleteRecords:
		p.handleDeleteRecords(ctx, m)
	case *corruptRead:
		if p.disk != nil {
			p.disk.onCorruptRead(m)
		}
	case *syncNow:
		p.onSyncNow(ctx)
	case *syncDone:
		p.onSyncDone(ctx, m)
	case *rollDone:
		p.onRollDone(ctx, m)
	case *logStartWritten:
		p.onLogStartWritten(ctx, m)
	case *retentionTick:
		p.onRetentionTick(ctx)
	case *cleaned:
		p.onCleaned(ctx, m)
	case *cleanSwapped:
		p.onCleanSwapped(ctx, m)
	case *cleanAborted:
		p.onCleanAborted(m)
	case *openRetryTick:
		p.onOpenRetry(ctx)
	case *lockRetryTick:
		if p.disk == nil && p.broken == nil {
			p.takeLock(ctx)
			p.unpark(ctx)
		}
	case *producerExpiryTick:
		p.expireProducers()
	case *orphanRetryTick:
		p.onOrphanRetry(ctx, m)
	case *actor.Settled:
		p.onSettled(ctx, m) // orphans.go
	}
}

func (p *partitionActor) onStarted(ctx actor.Context) {
	p.log = p.cfg.Log.With().Str("topic", p.cfg.Topic).Int32("partition", p.cfg.Partition).Logger()
	if p.cfg.Now == nil {
		p.cfg.Now = time.Now
	}
	if p.cfg.FS == nil {
		p.cfg.FS = storage.OSFS{}
	}
	p.producers = producers{}
	p.watchers = map[uint64]watch{}
	if p.cfg.Gate != nil {
		p.takeLock(ctx)
		return
	}
	p.open(ctx)
}

// open opens the log (the lock, in a cluster, held) and settles the leader
// epoch. A log that cannot be opened leaves the partition broken (KAFKA_STORAGE_ERROR)
// and is tried again (onOpenRetry); the error returned is a leader-epoch file that could
// not be written, to try again.
func (p *partitionActor) open(ctx actor.Context) error {
	// The leader-epoch file is a cache of the batches' epochs (epochs.go): recovery
	// checks it against them, and one that cannot be read or does not match them is
	// rebuilt from them.
	file, found, ferr := readEpochFile(p.cfg.FS, p.cfg.Dir)
	p.producers, p.openTxns, p.completing = producers{}, 0, nil
	l, err := openLog(p.cfg.Dir, logConfig{segmentBytes: p.cfg.SegmentBytes, log: p.log, epochs: file, epochsFound: found && ferr == nil,
		truncated: p.cfg.Metrics.truncated, corrupted: p.cfg.Metrics.corrupted, stale: p.cfg.Metrics.staleWrite,
		rollOnOpen: p.cfg.Gate != nil, fs: p.cfg.FS}, p.visitBatch)
	if err == nil {
		if err = p.loadLogStart(l); err != nil { // deleterecords.go
			l.closeFiles()
		} else if p.cfg.Cleaner != nil {
			p.cleanedTo = p.loadCleanerCkpt(l) // cleanerckpt.go
		}
	}
	if err != nil {
		// Answer every request with KAFKA_STORAGE_ERROR rather than crash-looping.
		p.broken = err
		p.cfg.Metrics.writeFailed("open")
		p.openRetryIn = min(max(2*p.openRetryIn, openRetryFirst), openRetryMax)
		p.log.Error().Err(err).Dur("retry_in", p.openRetryIn).Msg("partition_open_failed")
		p.openCancel = actor.After(ctx, p.openRetryIn, &openRetryTick{})
		return nil
	}
	p.broken, p.openRetryIn = nil, 0
	entries, reason, detail := file, "", ""
	switch {
	case ferr != nil:
		reason, detail = epochsReason(ferr), ferr.Error()
	case l.distrust != "":
		reason, detail = "contradicts_batches", l.distrust
	}
	if reason != "" || !found {
		entries = epochsOf(l.epochs)
	}
	epoch := p.cfg.LeaderEpoch
	if n := len(l.epochs); n > 0 {
		epoch = max(epoch, l.epochs[n-1].Epoch)
	}
	if newest, ok := lastEpoch(file); ok {
		// Also from a file not trusted: an epoch it names may have begun, and is never
		// begun again.
		epoch = max(epoch, newest.Epoch)
	}
	last, ok := lastEpoch(entries)
	began := p.cfg.Gate != nil && (!ok || last.Broker != p.cfg.NodeID || epoch > last.Epoch)
	write := began || reason != ""
	if began {
		// This broker begins leading the partition: a new epoch from the log end, on
		// disk before anything is appended under it. (A broker that led it last keeps
		// its epoch, also when it breaks a lapsed broker's lock again after a restart:
		// whatever that broker still writes carries an older epoch than this one; a
		// rebuilt history knows no broker, so a new epoch begins after a rebuild.)
		epoch++
		entries = append(entries, epochEntry{Epoch: epoch, StartOffset: l.EndOffset(), Broker: p.cfg.NodeID})
	} else if write && (!ok || epoch > last.Epoch) {
		// A broker alone records the epoch it leads at, so the next start is not below it.
		entries = append(entries, epochEntry{Epoch: epoch, StartOffset: l.EndOffset(), Broker: p.cfg.NodeID})
	}
	if write {
		werr := writeEpochs(p.cfg.FS, p.cfg.Dir, entries)
		if reason != "" {
			ev := p.log.Warn()
			if werr != nil {
				ev = p.log.Error().Err(werr)
			}
			ev.Str("reason", reason).Str("detail", clip(detail, 256)).Int("file_entries", len(file)).
				Int("batch_epochs", len(l.epochs)).Int32("leader_epoch", epoch).Msg("partition_leader_epochs_rebuilt")
		}
		switch {
		case werr != nil && p.cfg.Gate != nil:
			l.closeFiles()
			return werr
		case werr != nil:
			// Alone, the batches still say every epoch; the file is rebuilt at the next start.
			p.log.Error().Err(werr).Msg("partition_leader_epoch_write_failed")
		case began:
			p.log.Info().Int32("leader_epoch", epoch).Int64("start_offset", l.EndOffset()).Msg("partition_leader_epoch_began")
		}
	}
	l.noteEpoch(epoch, l.EndOffset())
	p.epoch = epoch
	if parent := ctx.Parent(); parent != nil {
		ctx.Send(parent, &epochOpened{topic: p.cfg.Topic, partition: p.cfg.Partition, epoch: epoch})
	}
	p.disk = l
	p.durable = l.EndOffset()
	p.repair, p.synced = false, syncedTo{seg: l.active(), size: l.active().size}
	p.end = p.cfg.Metrics.offsets().LogEnd(p.cfg.Topic, p.cfg.Partition)
	p.end.Set(p.highWatermark())
	if p.producerMt == nil {
		p.producerMt = p.cfg.Metrics.producerMetrics().Partition(p.cfg.Topic, p.cfg.Partition)
	}
	p.publishProducers()
	p.startProducerExpiry(ctx)
	p.checkOrphans(ctx)
	if p.cfg.RetentionCheck > 0 {
		p.stopRetention = actor.Every(ctx, p.cfg.RetentionCheck, &retentionTick{})
	}
	if p.cfg.IdleClose > 0 {
		ctx.SetReceiveTimeout(p.cfg.IdleClose)
	}
	ev := p.log.Debug()
	if p.cfg.Gate != nil {
		ev = p.log.Info() // in a cluster, a partition taken over is worth a line
	}
	ev.Int64("log_start_offset", l.StartOffset()).Int64("log_end_offset", l.EndOffset()).
		Int32("leader_epoch", p.epoch).Int("producers", len(p.producers)).Msg("partition_opened")
	return nil
}

// onStopping makes what was written durable (a graceful stop acknowledges what it can)
// and answers every waiter.
func (p *partitionActor) onStopping(ctx actor.Context) {
	defer p.unlockLeader()
	if p.lockCancel != nil {
		p.lockCancel()
	}
	if p.openCancel != nil {
		p.openCancel()
	}
	if p.stopRetention != nil {
		p.stopRetention()
	}
	p.end.Remove()
	p.producerMt.Remove()
	p.producerMt = nil
	p.stopProducerExpiry()
	p.stopOrphans()
	code := kerr.NotLeaderForPartition.Code
	if p.disk != nil && p.fenced() {
		// Another broker may lead the partition by now: nothing more is written here
		// (not even the recovery point), and nothing more is acknowledged.
		p.disk.closeFiles()
		p.durable = -1
	} else if p.disk != nil {
		if err := p.disk.Close(); err != nil {
			p.log.Error().Err(err).Msg("partition_close_failed")
		} else {
			p.durable = p.disk.EndOffset()
		}
	}
	for _, w := range p.pending {
		if w.end <= p.durable {
			w.reply.Resolve(w.resp)
		} else {
			w.fail(code)
		}
	}
	p.pending = nil
	p.answerDeletes(code)
	p.answerParked()
	p.answerRollQueue()
	p.answerLookups()
	p.abandonCleaning()
	p.stopFlush()
	p.releaseWatchers(ctx, true)
}

// onRestarting answers waiters of a failed incarnation with a retriable code: whether
// their batch is on disk is unknown, and the idempotent producer's retry is deduplicated.
func (p *partitionActor) onRestarting(ctx actor.Context) {
	defer p.unlockLeader()
	if p.lockCancel != nil {
		p.lockCancel()
	}
	if p.openCancel != nil {
		p.openCancel()
	}
	if p.stopRetention != nil {
		p.stopRetention()
	}
	p.end.Remove()
	p.producerMt.Remove()
	p.producerMt = nil
	p.stopProducerExpiry()
	p.stopOrphans()
	for _, w := range p.pending {
		w.fail(kerr.NotLeaderForPartition.Code)
	}
	p.pending = nil
	p.answerDeletes(kerr.NotLeaderForPartition.Code)
	p.answerParked()
	p.answerRollQueue()
	p.answerLookups()
	p.abandonCleaning()
	p.stopFlush()
	p.releaseWatchers(ctx, false)
	if p.disk != nil {
		p.disk.Close()
	}
}

func (p *partitionActor) onIdle(ctx actor.Context) {
	if p.disk != nil && p.cleaning == nil { // a pass holds its segments' files open
		p.disk.closeIdle(!p.syncing && p.roll == nil && len(p.pending) == 0)
	}
	ctx.SetReceiveTimeout(p.cfg.IdleClose)
}

// highWatermark is the end of what consumers may read: with durable produce, only what
// is on disk, so a consumer never sees a record that a crash could take back.
func (p *partitionActor) highWatermark() int64 {
	if p.cfg.FlushMessages == 1 {
		return p.durable
	}
	return p.disk.EndOffset()
}

// visibleEnd is where a fetch's data ends: the LSO at read_committed, else the high
// watermark.
func (p *partitionActor) visibleEnd(committed bool) int64 {
	if committed {
		return p.lastStable()
	}
	return p.highWatermark()
}

func (p *partitionActor) storageError() *Produced {
	return &Produced{ErrorCode: p.closedCode(), BaseOffset: -1, LogStartOffset: -1}
}

// closedCode answers a request while the log is not open: NOT_LEADER_OR_FOLLOWER while
// the partition waits for its lock (retriable: the previous leader is letting it go),
// KAFKA_STORAGE_ERROR when the log could not be opened.
func (p *partitionActor) closedCode() int16 {
	if p.broken == nil && !p.lockWaitSince.IsZero() {
		return kerr.NotLeaderForPartition.Code
	}
	return kerr.KafkaStorageError.Code
}

func (p *partitionActor) handleAppend(ctx actor.Context, m *appendBatch) {
	if p.disk == nil {
		if !p.park(ctx, m) {
			m.fail(p.closedCode())
		}
		return
	}
	if p.roll != nil || p.disk.rollDue(len(m.batch.records)) || p.timeRollDue(&m.batch.h) {
		// Before the producer checks: a pipelined producer's next batch waits behind
		// the one before it, rather than being judged out of sequence.
		p.queueForRoll(ctx, m)
		return
	}
	if m.marker != nil {
		p.handleMarker(ctx, m) // txn.go
		return
	}
	// Validated by the sender (validated.go); only what needs the partition's state is
	// checked here.
	h, records := m.batch.h, m.batch.records
	neverWritten := p.disk.EndOffset() == 0
	dupOffset, isDup, code := p.producers.check(&h, neverWritten)
	if code == kerr.OutOfOrderSequenceNumber.Code && !m.verified && h.Attributes&attrTransactional != 0 {
		// A pipelining producer's later batch of a transaction this partition has not
		// verified yet: the batch before it is out for verification and not appended,
		// so its sequence cannot be judged now. It is verified too and sent again after
		// that batch, in the connection's order (txnproduce.go), and judged then.
		if _, verify, token := p.txnCheck(&h, m); verify {
			m.reply.Resolve(&Produced{ErrorCode: kerr.InvalidTxnState.Code, BaseOffset: -1, LogStartOffset: -1,
				NeedsVerify: true, VerifyToken: token})
			return
		}
		// Or a batch sent behind such batches once the first of them is appended: the
		// transaction is open here, but the batches before this one are still held by
		// the connection for their verification. Verified too, it is sent again after
		// them, in the connection's order, and judged then.
		if e := p.producers[h.ProducerID]; e != nil && e.txnFirst >= 0 && e.epoch == h.ProducerEpoch {
			m.reply.Resolve(&Produced{ErrorCode: kerr.InvalidTxnState.Code, BaseOffset: -1, LogStartOffset: -1,
				NeedsVerify: true, VerifyToken: e.markers})
			return
		}
	}
	if code == 0 && !isDup {
		code = suspectCode(p.producers[h.ProducerID], &h) // orphans.go
	}
	switch {
	case code != 0:
		p.cfg.Metrics.rejectedBatch(kerr.ErrorForCode(code).Error())
		m.reply.Resolve(&Produced{ErrorCode: code, BaseOffset: -1, LogStartOffset: -1})
		return
	case isDup:
		// The original may still be waiting for its fsync: the duplicate waits with it.
		p.ack(ctx, dupOffset+int64(h.LastOffsetDelta)+1,
			&Produced{BaseOffset: dupOffset, LogStartOffset: p.disk.StartOffset()}, m.reply)
		return
	}
	if code, verify, token := p.txnCheck(&h, m); code != 0 {
		if !verify {
			p.cfg.Metrics.rejectedBatch(kerr.ErrorForCode(code).Error())
		}
		m.reply.Resolve(&Produced{ErrorCode: code, BaseOffset: -1, LogStartOffset: -1, NeedsVerify: verify, VerifyToken: token})
		return
	}
	if p.fenced() {
		m.reply.Resolve(&Produced{ErrorCode: kerr.NotLeaderForPartition.Code, BaseOffset: -1, LogStartOffset: -1})
		return
	}
	opens := h.Attributes&attrTransactional != 0 && (p.producers[h.ProducerID] == nil || p.producers[h.ProducerID].txnFirst < 0)
	p.makeRoom(h.ProducerID) // producerstate.go
	base, err := p.disk.append(records, &h, p.epoch)
	if err != nil {
		p.cfg.Metrics.writeFailed("append")
		p.log.Error().Err(err).Msg("partition_append_failed")
		m.reply.Resolve(p.storageError())
		return
	}
	p.producers.record(&h)
	if h.ProducerID >= 0 {
		p.producers[h.ProducerID].seenMS = p.cfg.Now().UnixMilli()
	}
	if opens {
		p.openTxns++
	}
	p.cfg.Metrics.appended(len(records))
	p.unsynced++
	resp := &Produced{BaseOffset: base, LogStartOffset: p.disk.StartOffset(), LogAppendTime: m.batch.appendTime}
	p.ack(ctx, h.LastOffset()+1, resp, m.reply)
	if p.cfg.FlushMessages != 1 {
		if p.unsynced >= p.cfg.FlushMessages && !p.syncing {
			p.startSync(ctx)
		}
		p.armFlush(ctx)
		p.notifyWatchers(ctx)
	}
}

// ack answers a produce now, or parks it until an fsync covers end.
func (p *partitionActor) ack(ctx actor.Context, end int64, resp *Produced, reply actor.Promise) {
	if p.cfg.FlushMessages != 1 || end <= p.durable {
		reply.Resolve(resp)
		return
	}
	p.pending = append(p.pending, pendingAck{end: end, resp: resp, reply: reply})
	actor.HandedOn(ctx)
	p.requestSync(ctx)
}

// requestSync asks for an fsync of what waits in pending, once the writes already in
// the mailbox are appended too (group commit across producers: produces and markers
// that arrive together, such as the markers of every transaction one coordinator
// journal write decided, share one fsync rather than each waiting for the one before).
// The fsync starts when the syncNow sent here is handled, behind those writes; while
// one runs, the next is asked for when it is done (settle).
func (p *partitionActor) requestSync(ctx actor.Context) {
	if p.syncing || p.syncAsked {
		return
	}
	p.syncAsked = true
	ctx.Send(ctx.Self(), &syncNow{})
}

// onSyncNow starts the fsync requestSync asked for, unless one runs already (it asks
// again when done) or nothing waits any more.
func (p *partitionActor) onSyncNow(ctx actor.Context) {
	p.syncAsked = false
	if p.disk == nil || p.syncing || len(p.pending) == 0 {
		return
	}
	p.startSync(ctx)
}

// startSync fsyncs the active segment on a goroutine. Appends that arrive meanwhile are
// written at once and share the next fsync (group commit).
func (p *partitionActor) startSync(ctx actor.Context) {
	l := p.disk
	s := l.active()
	end, size := l.EndOffset(), s.size
	f, err := s.file()
	if err != nil {
		p.onSyncDone(ctx, &syncDone{log: l, seg: s, size: size, end: end, err: err})
		return
	}
	from := p.repairFrom(s)
	idx := l.dirtyTxnIndexes()
	p.syncing = true
	batches := p.unsynced
	p.unsynced = 0
	met := p.cfg.Metrics
	actor.Background(ctx, func() any {
		start := time.Now()
		var err error
		if from >= 0 {
			err = rewriteTail(f, from, size)
		} else {
			// fdatasync: the records and the size that reads them back; the segment's
			// mtime is nothing recovery reads.
			err = f.Datasync()
		}
		met.synced(time.Since(start), batches)
		return &syncDone{log: l, seg: s, size: size, end: end, err: err, idxErr: syncTxnIndexes(idx)}
	})
}

func (p *partitionActor) onSyncDone(ctx actor.Context, m *syncDone) {
	p.syncing = false
	if m.idxErr != nil {
		p.log.Warn().Err(m.idxErr).Msg("partition_txn_index_sync_failed")
	}
	if m.log != p.disk {
		// Of a log closed since (dropLog): nothing it says holds for this one.
		if p.disk != nil {
			p.settle(ctx, p.durable, nil)
		}
		return
	}
	switch {
	case errors.Is(m.err, errTailLost):
		p.dropLog(ctx, m.err)
		return
	case m.err != nil:
		p.repair = true
	case m.seg != p.synced.seg || m.size > p.synced.size:
		p.repair = false
		p.synced = syncedTo{seg: m.seg, size: m.size}
	default:
		p.repair = false
	}
	p.settle(ctx, m.end, m.err)
}

// settle records what an fsync (err: failed) made durable up to end, and answers the
// produces it covers.
func (p *partitionActor) settle(ctx actor.Context, end int64, err error) {
	if err != nil && end > p.durable {
		// The page cache may have dropped what it could not write; fail the waiters
		// this fsync was for. Their producers retry and idempotence deduplicates.
		p.cfg.Metrics.writeFailed("fsync")
		p.log.Error().Err(err).Int64("end_offset", end).Msg("partition_fsync_failed")
		keep := p.pending[:0]
		for _, w := range p.pending {
			if w.end <= end {
				w.fail(p.closedCode())
			} else {
				keep = append(keep, w)
			}
		}
		p.pending = keep
	} else if end > p.durable {
		p.durable = end
		// Recorded before the acknowledgements below; no fsync of its own (recovery.go).
		// A fenced partition writes nothing more (its successor keeps the file).
		if p.disk != nil && !p.fenced() {
			if err := p.disk.saveRecoveryPoint(p.durable, false); err != nil {
				p.log.Warn().Err(err).Msg("partition_recovery_point_write_failed")
			}
		}
	}
	keep := p.pending[:0]
	fenced := p.fenced()
	for _, w := range p.pending {
		if w.end <= p.durable {
			if fenced {
				// On disk, but the lease may have lapsed meanwhile and the partition's
				// new leader may have recovered the log before it: not acknowledged.
				w.fail(kerr.NotLeaderForPartition.Code)
				continue
			}
			w.reply.Resolve(w.resp)
		} else {
			keep = append(keep, w)
		}
	}
	p.pending = keep
	switch {
	case p.disk == nil || p.syncing:
	case len(p.pending) > 0:
		// The writes that came during this fsync are appended; those still in the
		// mailbox join them.
		p.requestSync(ctx)
	case p.cfg.FlushMessages != 1 && p.unsynced >= p.cfg.FlushMessages:
		p.startSync(ctx)
	}
	p.notifyWatchers(ctx)
}

// fenced reports whether the gate has closed (cluster): nothing more is written or
// acknowledged, and the ownership controller stops the actor.
func (p *partitionActor) fenced() bool {
	if p.cfg.Gate == nil || p.cfg.Gate() {
		return false
	}
	if !p.gateClosed {
		p.gateClosed = true
		p.log.Warn().Msg("partition_fenced")
	}
	return true
}

// checkEpoch is Apache's check of the client's current leader epoch (KIP-320).
func (p *partitionActor) checkEpoch(current int32) int16 {
	switch {
	case current < 0 || current == p.epoch:
		return 0
	case current > p.epoch:
		return kerr.UnknownLeaderEpoch.Code
	}
	return kerr.FencedLeaderEpoch.Code
}

// read answers a fetch's read: a *Fetched when it is settled here (an error, nothing to
// read), else a *readPlan the fetch reads itself, off this mailbox (readplan.go).
func (p *partitionActor) read(ctx actor.Context, m *readLog) any {
	if p.disk == nil {
		return &Fetched{ErrorCode: p.closedCode(), HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1}
	}
	hw, start, lso := p.highWatermark(), p.disk.StartOffset(), p.lastStable()
	out := &Fetched{HighWatermark: hw, LastStableOffset: lso, LogStartOffset: start}
	if code := p.checkEpoch(m.currentEpoch); code != 0 {
		out.ErrorCode = code
		return out
	}
	// As Apache: out of range is judged against the log end, so a fetch at an offset
	// written but not yet durable simply waits.
	if m.offset < start || m.offset > p.disk.EndOffset() {
		out.ErrorCode = kerr.OffsetOutOfRange.Code
		return out
	}
	limit := hw
	if m.committed {
		// read_committed: nothing past the LSO, and the aborted transactions of the
		// range, so the client drops their records.
		limit = lso
		out.Aborted = p.disk.abortedIn(m.offset, lso)
	}
	plan, err := p.disk.planRead(m.offset, limit, m.maxBytes, m.minOne)
	if errors.Is(err, errCorruptRange) {
		// Reported once when found; the consumer retries until an operator restores
		// the segment (docs/data-path.md).
		p.log.Debug().Err(err).Int64("offset", m.offset).Msg("partition_read_corrupt")
		out.ErrorCode = kerr.KafkaStorageError.Code
		return out
	}
	if err != nil {
		p.log.Error().Err(err).Int64("offset", m.offset).Msg("partition_read_failed")
		out.ErrorCode = kerr.KafkaStorageError.Code
		return out
	}
	if plan == nil {
		return out
	}
	plan.out = *out
	plan.partition = ctx.Self()
	plan.met = p.cfg.Metrics
	plan.log = p.log
	return plan
}

func (p *partitionActor) handleWatch(ctx actor.Context, m *watch) {
	if p.disk == nil || p.visibleEnd(m.committed) > m.offset {
		ctx.Send(m.to, &dataReady{id: m.id})
		return
	}
	p.watchers[m.id] = *m
}

// notifyWatchers wakes the parked fetches the high watermark has passed, and publishes it
// (kaas_log_end_offset): every move of it comes through here.
func (p *partitionActor) notifyWatchers(ctx actor.Context) {
	hw := p.highWatermark()
	p.end.Set(hw)
	p.publishProducers()
	if len(p.watchers) == 0 {
		return
	}
	lso := p.lastStable()
	for id, w := range p.watchers {
		if end := hw; w.committed && lso > w.offset || !w.committed && end > w.offset {
			delete(p.watchers, id)
			ctx.Send(w.to, &dataReady{id: w.id})
		}
	}
}

// releaseWatchers wakes every parked fetch: the partition is stopping (gone) or
// restarting.
func (p *partitionActor) releaseWatchers(ctx actor.Context, gone bool) {
	for id, w := range p.watchers {
		delete(p.watchers, id)
		ctx.Send(w.to, &dataReady{id: w.id, gone: gone})
	}
}

func (p *partitionActor) listOffset(ctx actor.Context, m *listOffset) *Listed {
	if p.disk == nil {
		return &Listed{ErrorCode: p.closedCode(), Timestamp: -1, Offset: -1, LeaderEpoch: -1}
	}
	out := &Listed{Timestamp: -1, Offset: -1, LeaderEpoch: -1}
	if code := p.checkEpoch(m.currentEpoch); code != 0 {
		out.ErrorCode = code
		return out
	}
	hw := p.highWatermark()
	if m.committed {
		hw = p.lastStable() // Apache: read_committed finds nothing past the LSO
	}
	switch m.timestamp {
	case earliestTimestamp, earliestLocalTimestamp:
		out.Offset = p.disk.StartOffset()
	case latestTimestamp:
		out.Offset = hw
	case maxTimestamp:
		plan, err := p.disk.planMaxTime(hw)
		if err != nil {
			p.log.Error().Err(err).Msg("partition_read_failed")
			out.ErrorCode = kerr.KafkaStorageError.Code
			return out
		}
		if plan != nil {
			p.startTimeLookup(ctx, m, plan) // read off this turn (timeplan.go)
			return nil
		}
	case latestTieredTimestamp:
		// KIP-1005: nothing is in remote storage, so there is no such offset.
		return out
	default:
		if m.timestamp < 0 {
			out.ErrorCode = kerr.InvalidRequest.Code
			return out
		}
		plan, err := p.disk.planTime(m.timestamp, hw)
		if err != nil {
			p.log.Error().Err(err).Msg("partition_read_failed")
			out.ErrorCode = kerr.KafkaStorageError.Code
			return out
		}
		p.startTimeLookup(ctx, m, plan) // read off this turn (timeplan.go)
		return nil
	}
	if out.Offset >= 0 {
		out.LeaderEpoch = p.epochFor(out.Offset)
	}
	return out
}

// epochFor is the leader epoch that wrote offset (the current one at the log end).
func (p *partitionActor) epochFor(offset int64) int32 {
	ep := p.epoch
	for i := len(p.disk.epochs) - 1; i >= 0; i-- {
		if p.disk.epochs[i].Offset <= offset {
			if offset < p.disk.EndOffset() {
				ep = p.disk.epochs[i].Epoch
			}
			break
		}
	}
	return ep
}

func (p *partitionActor) epochEnd(m *epochEndOf) *EpochEnd {
	if p.disk == nil {
		return &EpochEnd{ErrorCode: p.closedCode(), LeaderEpoch: -1, EndOffset: -1}
	}
	if code := p.checkEpoch(m.currentEpoch); code != 0 {
		return &EpochEnd{ErrorCode: code, LeaderEpoch: -1, EndOffset: -1}
	}
	ep, end := p.disk.epochEnd(m.epoch, p.epoch)
	if end > p.highWatermark() && ep == p.epoch {
		end = p.highWatermark()
	}
	return &EpochEnd{LeaderEpoch: ep, EndOffset: end}
}

func (p *partitionActor) onRetentionTick(ctx actor.Context) {
	if p.disk == nil || p.fenced() {
		return // a fenced leader deletes nothing its successor may still serve
	}
	defer p.maybeClean(ctx)
	if c := p.cfg.Cleaner; p.cleaning != nil || (c != nil && !c.Delete) {
		return // compact only, or a pass holds the segments
	}
	n, err := p.disk.retain(p.cfg.Now().UnixMilli(), p.cfg.RetentionMS, p.cfg.RetentionBytes)
	if err != nil {
		p.log.Error().Err(err).Msg("partition_retention_failed")
	}
	if n > 0 {
		start := p.disk.StartOffset()
		// Apache drops producers whose last batch left the log with it.
		for id, e := range p.producers {
			if len(e.batches) > 0 && e.batches[len(e.batches)-1].lastOffset < start {
				delete(p.producers, id)
			}
		}
		p.countOpen()
		p.log.Info().Int("segments", n).Int64("log_start_offset", start).Msg("partition_retention_deleted")
	}
}

func (p *partitionActor) String() string {
	return fmt.Sprintf("partition %s-%d", p.cfg.Topic, p.cfg.Partition)
}

// onOpenRetry opens again a log that could not be opened: recovery reads and checks
// every file afresh, so an I/O error that passes (an fsync of the newest segment that
// failed once) does not keep the partition from its clients until a restart. A tick
// that finds the log open (a timer fired twice) does nothing.
func (p *partitionActor) onOpenRetry(ctx actor.Context) {
	if p.disk != nil || p.broken == nil {
		return
	}
	p.broken = nil
	if p.cfg.Gate != nil {
		p.takeLock(ctx)
		return
	}
	p.open(ctx)
}

// openRetryFirst and openRetryMax bound the wait before a log that could not be opened
// is tried again: it doubles from the first to the most.
const (
	openRetryFirst = 100 * time.Millisecond
	openRetryMax   = 30 * time.Second
)

// openRetryTick tells the actor to try opening its log again.
type openRetryTick struct{ actor.Tick }

// onReconfigure applies the topic's changed configs at once: the next roll, fsync and
// retention check use them, and a changed retention deletes what it no longer keeps
// now rather than at the next check.
func (p *partitionActor) onReconfigure(ctx actor.Context, r *reconfigure) {
	retention := r.retentionMS != p.cfg.RetentionMS || r.retentionBytes != p.cfg.RetentionBytes ||
		(r.cleaner == nil) != (p.cfg.Cleaner == nil)
	p.cfg.SegmentBytes, p.cfg.RetentionMS, p.cfg.RetentionBytes, p.cfg.FlushMessages, p.cfg.Cleaner, p.cfg.Timing =
		r.segmentBytes, r.retentionMS, r.retentionBytes, r.flushMessages, r.cleaner, r.timing
	if c := p.current; c != nil {
		c.SegmentBytes, c.RetentionMS, c.RetentionBytes, c.FlushMessages, c.Cleaner, c.Timing =
			r.segmentBytes, r.retentionMS, r.retentionBytes, r.flushMessages, r.cleaner, r.timing
	}
	if p.clock.seg != nil {
		p.clock.seg = nil // the jitter is drawn again by the new settings
	}
	if p.disk != nil {
		p.disk.cfg.segmentBytes = r.segmentBytes
	}
	p.log.Debug().Int64("segment_bytes", r.segmentBytes).Int64("retention_ms", r.retentionMS).
		Int64("retention_bytes", r.retentionBytes).Int64("flush_messages", r.flushMessages).Msg("partition_reconfigured")
	if retention {
		p.onRetentionTick(ctx)
	}
}
