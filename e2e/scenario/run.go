package scenario

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Main runs the scenario for the client that newClient builds and prints one verdict line,
// `PASS <name>: ...` or `FAIL <name>: <reason>`, on stdout (everything else goes to
// stderr); it exits 1 on FAIL.
func Main(name string, newClient func(Env) (Client, error)) {
	env := FromEnv(strings.Fields(name)[0])
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), env.Timeout)
	summary, err := func() (string, error) {
		c, err := newClient(env)
		if err != nil {
			return "", fmt.Errorf("client: %w", err)
		}
		if cl, ok := c.(interface{ Close() }); ok {
			defer cl.Close()
		}
		return Run(ctx, env, c)
	}()
	cancel()
	if err != nil {
		fmt.Printf("FAIL %s: %v (after %.1fs)\n", name, err, time.Since(start).Seconds())
		os.Exit(1)
	}
	fmt.Printf("PASS %s: %s (%.1fs)\n", name, summary, time.Since(start).Seconds())
}

// Run is the scenario of issue 6: produce, consume in a group of three through a leave, a
// join and a broker restart, check that nothing was lost and the commits reached the log
// end, then administer the empty group down to its deletion. It returns the PASS summary.
func Run(ctx context.Context, env Env, c Client) (string, error) {
	n := env.Records
	if err := c.CreateTopic(ctx, env.Topic, env.Partitions); err != nil {
		return "", fmt.Errorf("create topic %s with %d partitions: %w", env.Topic, env.Partitions, err)
	}
	if err := c.Produce(ctx, env.Topic, n); err != nil {
		return "", fmt.Errorf("produce %d records: %w", n, err)
	}
	end, err := c.EndOffsets(ctx, env.Topic)
	if err != nil {
		return "", fmt.Errorf("list end offsets after produce: %w", err)
	}
	if err := CheckEnd(end, env.Partitions, n); err != nil {
		return "", fmt.Errorf("after produce: %w", err)
	}

	t := NewTracker(n, end)
	stats, err := consume(ctx, env, c, t, end)
	if err != nil {
		return "", fmt.Errorf("consume: %w", err)
	}

	admin, err := Administer(ctx, env, c, end)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d produced to %d partitions; consumed by a group through 1 leave, 1 join, %s (%s); committed = log end; %s",
		n, env.Partitions, restarts(env), stats, admin), nil
}

func restarts(env Env) string {
	if env.Restart == "" {
		return "no broker restart (E2E_RESTART unset)"
	}
	return "1 broker restart"
}

// CheckEnd checks that n records landed on exactly partitions partitions, none empty.
func CheckEnd(end map[int32]int64, partitions, n int) error {
	var sum int64
	for p, o := range end {
		if o <= 0 {
			return fmt.Errorf("partition %d is empty (end offsets %v): records not spread", p, end)
		}
		sum += o
	}
	if len(end) != partitions || sum != int64(n) {
		return fmt.Errorf("end offsets %v: %d partitions holding %d records, want %d holding %d", end, len(end), sum, partitions, n)
	}
	return nil
}

// consume runs the group: members 0, 1, 2 start; at a quarter member 0 leaves, at a half
// member 3 joins, at three quarters the broker restarts; then every record must arrive
// and the group's commits reach the log end.
func consume(ctx context.Context, env Env, c Client, t *Tracker, end map[int32]int64) (Stats, error) {
	n := env.Records
	members := map[int]Member{}
	defer func() {
		for _, m := range members {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = m.Close(cctx)
			cancel()
		}
	}()
	join := func(id int) error {
		m, err := c.NewMember(ctx, id, t)
		if err != nil {
			return fmt.Errorf("start member %d: %w", id, err)
		}
		members[id] = m
		return nil
	}
	leave := func(id int) error {
		m := members[id]
		delete(members, id)
		if err := m.Close(ctx); err != nil {
			return fmt.Errorf("member %d leaves: %w", id, err)
		}
		return nil
	}
	// step opens the gate to gate distinct records and waits for them. The last step opens
	// it for good: a member redelivered records it must process again (after a rebalance)
	// may not be held once every record was seen once.
	step := func(gate int) error {
		if gate >= n {
			t.Open(math.MaxInt)
		} else {
			t.Open(gate)
		}
		if err := t.Wait(ctx, gate); err != nil {
			return err
		}
		settle(ctx, c, env, t)
		return nil
	}

	for id := range 3 {
		if err := join(id); err != nil {
			return Stats{}, err
		}
	}
	// Hold consumption until all three share the partitions, so the member that leaves
	// has records of its own.
	if err := WaitGroup(ctx, c, env.Group, "Stable", 3); err != nil {
		return Stats{}, err
	}
	if err := step(n / 4); err != nil {
		return Stats{}, err
	}
	if err := leave(0); err != nil {
		return Stats{}, err
	}
	if err := WaitGroup(ctx, c, env.Group, "Stable", 2); err != nil {
		return Stats{}, fmt.Errorf("after member 0 left: %w", err)
	}
	if err := step(n / 2); err != nil {
		return Stats{}, err
	}
	if err := join(3); err != nil {
		return Stats{}, err
	}
	if err := WaitGroup(ctx, c, env.Group, "Stable", 3); err != nil {
		return Stats{}, fmt.Errorf("after member 3 joined: %w", err)
	}
	if err := step(3 * n / 4); err != nil {
		return Stats{}, err
	}
	// Every commit acknowledged before the restart must survive it.
	before, err := c.FetchOffsets(ctx, env.Group, env.Topic)
	if err != nil {
		return Stats{}, fmt.Errorf("fetch committed offsets before the restart: %w", err)
	}
	if err := env.RestartBroker(ctx); err != nil {
		return Stats{}, err
	}
	after, err := fetchOffsetsRetry(ctx, c, env)
	if err != nil {
		return Stats{}, fmt.Errorf("fetch committed offsets after the restart: %w", err)
	}
	for p, o := range before {
		if after[p] < o {
			return Stats{}, fmt.Errorf("committed offsets went back across the broker restart: before %v, after %v", before, after)
		}
	}
	if err := step(n); err != nil {
		return Stats{}, err
	}
	if err := WaitCommitted(ctx, c, env, end); err != nil {
		return Stats{}, fmt.Errorf("all records consumed (%s), but %w", t.Stats(), err)
	}
	for _, id := range slices.Sorted(maps.Keys(members)) {
		if err := leave(id); err != nil {
			return Stats{}, err
		}
	}
	if err := t.Check(); err != nil {
		return Stats{}, err
	}
	if err := expectCommitted(ctx, c, env, end); err != nil {
		return Stats{}, fmt.Errorf("after every member left: %w", err)
	}
	return t.Stats(), nil
}

// settle gives the members, held at a gate, a moment to commit what they consumed, so the
// next event (leave, join, restart) acts on a group with real commits behind it. Clients
// that commit on an interval get there; one that does not only adds duplicates, so this
// waits a bounded time and reports instead of failing.
func settle(ctx context.Context, c Admin, env Env, t *Tracker) {
	deadline, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	frontier := t.Frontier()
	for {
		committed, err := c.FetchOffsets(deadline, env.Group, env.Topic)
		behind := err != nil
		for p, o := range frontier {
			if committed[p] < o {
				behind = true
			}
		}
		if !behind {
			fmt.Fprintf(os.Stderr, "e2e: %s; committed %v\n", t.Stats(), committed)
			return
		}
		select {
		case <-deadline.Done():
			fmt.Fprintf(os.Stderr, "e2e: %s; consumed up to %v, committed only %v (%v)\n", t.Stats(), frontier, committed, err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fetchOffsetsRetry fetches committed offsets, retrying while the broker comes back.
func fetchOffsetsRetry(ctx context.Context, c Admin, env Env) (map[int32]int64, error) {
	deadline, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		got, err := c.FetchOffsets(deadline, env.Group, env.Topic)
		if err == nil {
			return got, nil
		}
		select {
		case <-deadline.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitGroup polls DescribeGroups until the group is in state with members members, each
// holding partitions (where the client decodes assignments).
func WaitGroup(ctx context.Context, c Admin, group, state string, members int) error {
	var last Group
	var err error
	for {
		last, err = c.DescribeGroup(ctx, group)
		if errors.Is(err, ErrUnsupported) {
			return nil
		}
		if err == nil && last.State == state && last.Members == members && (last.Assigned < 0 || last.Assigned == members) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("describe group %s: %w", group, err)
			}
			return fmt.Errorf("describe group %s: state %q with %d members (%d assigned), want %q with %d, all assigned",
				group, last.State, last.Members, last.Assigned, state, members)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitCommitted polls the committed offsets until they equal end: members commit on an
// interval, so the last commit lands a little after the last record.
func WaitCommitted(ctx context.Context, c Admin, env Env, end map[int32]int64) error {
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := expectCommitted(deadline, c, env, end)
		if err == nil {
			return nil
		}
		select {
		case <-deadline.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func expectCommitted(ctx context.Context, c Admin, env Env, want map[int32]int64) error {
	got, err := c.FetchOffsets(ctx, env.Group, env.Topic)
	if err != nil {
		return fmt.Errorf("fetch committed offsets: %w", err)
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("committed offsets %v, want the log end %v", got, want)
	}
	return nil
}

// Administer runs the admin steps on the empty group (list, describe, reset, delete
// offsets, delete group, checking each with a fetch) and returns the PASS summary of them:
// the steps done, the steps the client library lacks, and the deviations from Apache that
// were tolerated.
func Administer(ctx context.Context, env Env, a Admin, end map[int32]int64) (string, error) {
	var notes []string
	skipped, err := administer(ctx, env, a, end, &notes)
	if err != nil {
		return "", fmt.Errorf("admin: %w", err)
	}
	var done, why []string
	for _, step := range adminSteps {
		if reason, ok := skipped[step]; ok {
			why = append(why, step+" ("+reason+")")
		} else {
			done = append(done, step)
		}
	}
	s := "admin: " + strings.Join(done, ", ")
	if len(why) > 0 {
		s += "; skipped: " + strings.Join(why, "; ")
	}
	if len(notes) > 0 {
		s += "; note: " + strings.Join(notes, "; ")
	}
	return s, nil
}

// adminSteps are the admin steps of the scenario, in order.
var adminSteps = []string{"list groups", "describe group", "fetch offsets", "reset offsets", "delete offsets", "delete group"}

// administer runs the admin steps on the now empty group and returns the steps the client
// library cannot do; deviations from Apache that clients tolerate are added to notes.
func administer(ctx context.Context, env Env, c Admin, end map[int32]int64, notes *[]string) (map[string]string, error) {
	skipped := map[string]string{}
	skip := func(what string, err error) bool {
		if errors.Is(err, ErrUnsupported) {
			skipped[what] = err.Error()
			return true
		}
		return false
	}
	g := env.Group

	// A consumer that closed without its LeaveGroup reaching the broker (librdkafka skips
	// it while it is still rejoining after a broker restart) stays a member until its
	// session expires, as in Apache: wait for that, and say so, before the checks.
	if d, err := c.DescribeGroup(ctx, g); err == nil && (d.State != "Empty" || d.Members != 0) {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := WaitGroup(wctx, c, g, "Empty", 0)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("group not empty after its members closed: %w", err)
		}
		*notes = append(*notes, fmt.Sprintf("%d member(s) closed without leaving; the group was Empty once their sessions expired", d.Members))
	}

	groups, err := c.ListGroups(ctx)
	if !skip("list groups", err) {
		if err != nil {
			return nil, fmt.Errorf("list groups: %w", err)
		}
		state, ok := groups[g]
		if !ok {
			return nil, fmt.Errorf("list groups: %s missing from %v", g, groups)
		}
		if state != "" && state != "Empty" {
			return nil, fmt.Errorf("list groups: %s is %q, want Empty", g, state)
		}
	}
	d, err := c.DescribeGroup(ctx, g)
	if !skip("describe group", err) {
		if err != nil {
			return nil, fmt.Errorf("describe group: %w", err)
		}
		if d.State != "Empty" || d.Members != 0 {
			return nil, fmt.Errorf("describe group: %q with %d members, want Empty with 0", d.State, d.Members)
		}
	}

	zero := make(map[int32]int64, len(end))
	for p := range end {
		zero[p] = 0
	}
	err = c.CommitOffsets(ctx, g, env.Topic, zero)
	if !skip("reset offsets", err) {
		if err != nil {
			return nil, fmt.Errorf("reset offsets to 0 on the empty group: %w", err)
		}
		if err := expectOffsets(ctx, c, env, zero, "after reset"); err != nil {
			return nil, err
		}
	}

	err = c.DeleteOffsets(ctx, g, env.Topic, []int32{0})
	if !skip("delete offsets", err) {
		if err != nil {
			return nil, fmt.Errorf("delete offsets of partition 0: %w", err)
		}
		got, err := c.FetchOffsets(ctx, g, env.Topic)
		if err != nil {
			return nil, fmt.Errorf("fetch offsets after delete offsets: %w", err)
		}
		if _, ok := got[0]; ok || len(got) != len(end)-1 {
			return nil, fmt.Errorf("offsets after deleting partition 0: %v, want every partition but 0", got)
		}
	}

	err = c.DeleteGroup(ctx, g)
	if !skip("delete group", err) {
		if err != nil {
			return nil, fmt.Errorf("delete group: %w", err)
		}
		if groups, err := c.ListGroups(ctx); err == nil {
			if state, ok := groups[g]; ok {
				return nil, fmt.Errorf("list groups after delete: %s still listed (%q)", g, state)
			}
		} else if !errors.Is(err, ErrUnsupported) {
			return nil, fmt.Errorf("list groups after delete: %w", err)
		}
		d, err := c.DescribeGroup(ctx, g)
		switch {
		case errors.Is(err, ErrUnsupported), errors.Is(err, kerr.GroupIDNotFound):
		case err != nil:
			return nil, fmt.Errorf("describe group after delete: %w", err)
		case d.State != "Dead" || d.Members != 0:
			return nil, fmt.Errorf("describe group after delete: %q with %d members, want Dead", d.State, d.Members)
		}
		// Apache answers OffsetFetch of an unknown group with no offsets and no error
		// (GROUP_ID_NOT_FOUND is never returned for classic groups); accept the error too,
		// but say so.
		err = expectOffsets(ctx, c, env, map[int32]int64{}, "after delete group")
		switch {
		case errors.Is(err, kerr.GroupIDNotFound):
			*notes = append(*notes, "OffsetFetch of the deleted group answered GROUP_ID_NOT_FOUND where Apache answers no offsets")
		case err != nil:
			return nil, err
		}
	}
	return skipped, nil
}

func expectOffsets(ctx context.Context, c Admin, env Env, want map[int32]int64, when string) error {
	got, err := c.FetchOffsets(ctx, env.Group, env.Topic)
	if err != nil {
		return fmt.Errorf("fetch offsets %s: %w", when, err)
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("offsets %s: %v, want %v", when, got, want)
	}
	return nil
}
