package partition

import (
	"errors"
	"time"

	"kaas/actors/actor"
)

// The catalogue's file writes (a new topic's topic.json, a deleted topic's directory
// moved aside, more partitions, a new block of producer ids) each take an fsync or two.
// The topics manager also routes every Produce, Fetch and ListOffsets, so it never makes
// them in its Receive: each write is a catalogJob, run on a goroutine one at a time in
// the order the requests came, and its outcome is applied back in the Receive. Meanwhile
// the data path goes on, and the names being created or deleted are reserved.

// catalogJob is one catalogue write.
type catalogJob struct {
	// work runs on a goroutine; it touches no manager state.
	work func() error
	// done runs in the manager's Receive with work's outcome.
	done func(ctx actor.Context, err error)
	// finished carries work's outcome too, for a manager that stops while it runs.
	finished chan error
}

// catalogWritten is a job's outcome arriving back in the manager's mailbox.
type catalogWritten struct {
	job *catalogJob
	err error
}

// errStopping answers catalogue writes still queued when the manager stops.
var errStopping = errors.New("topics manager stopping")

// stopWriteWait bounds how long a stopping manager waits for the write in progress.
const stopWriteWait = 5 * time.Second

// enqueue queues a write and starts it if none is running.
func (m *manager) enqueue(ctx actor.Context, work func() error, done func(ctx actor.Context, err error)) {
	m.jobs = append(m.jobs, &catalogJob{work: work, done: done, finished: make(chan error, 1)})
	m.runNextJob(ctx)
}

func (m *manager) runNextJob(ctx actor.Context) {
	if m.writing || len(m.jobs) == 0 {
		return
	}
	j := m.jobs[0]
	m.writing = true
	before := m.cfg.BeforeCatalogWrite
	actor.Background(ctx, func() any {
		if before != nil {
			before()
		}
		err := j.work()
		j.finished <- err
		return &catalogWritten{job: j, err: err}
	})
}

func (m *manager) onCatalogWritten(ctx actor.Context, w *catalogWritten) {
	if len(m.jobs) == 0 || m.jobs[0] != w.job {
		return // answered while stopping, or a previous incarnation's
	}
	m.jobs[0] = nil
	m.jobs = m.jobs[1:]
	m.writing = false
	w.job.done(ctx, w.err)
	m.runNextJob(ctx)
}

// finishJobs answers every queued write as the manager stops or restarts: the one in
// progress with its outcome (waited for, up to stopWriteWait), the rest with errStopping,
// unrun.
func (m *manager) finishJobs(ctx actor.Context) {
	m.stopping = true
	jobs := m.jobs
	m.jobs = nil
	for i, j := range jobs {
		err := errStopping
		if i == 0 && m.writing {
			t := time.NewTimer(stopWriteWait)
			select {
			case err = <-j.finished:
			case <-t.C:
				m.log.Error().Dur("waited_ms", stopWriteWait).Msg("topic_catalog_write_did_not_finish")
			}
			t.Stop()
		}
		j.done(ctx, err)
	}
	m.writing = false
}

// waitAll calls finish once every part of a request is answered: add before each part
// is handed out, done as each is answered, and one last done when all were handed out.
type waitAll struct {
	left   int
	finish func()
}

func newWaitAll(finish func()) *waitAll { return &waitAll{left: 1, finish: finish} }

func (w *waitAll) add() { w.left++ }

func (w *waitAll) done() {
	if w.left--; w.left == 0 {
		w.finish()
	}
}
