// Command check is the Go half of the scenarios whose client has no Go program: kcat's
// (which has no admin at all) and python's (whose confluent-kafka 1.7 admin lacks some
// calls). It checks with franz-go (kgo, kadm) what the client did and does the admin steps
// the client cannot. On failure it prints the reason on stdout and exits 1, so the calling
// script can put it in its FAIL line.
//
//	check create-topic                 create E2E_TOPIC with E2E_PARTITIONS partitions
//	check wait-group STATE N           wait until the group is STATE with N members, all assigned
//	check wait-committed               wait until the committed offsets equal the log end
//	check committed-now                the committed offsets equal the log end now (the broker may still be starting)
//	check consumed FILE...             every record of the log is in FILEs (lines "partition offset key value")
//	check admin                        the admin steps with kadm, printing their summary
//	check delete-offsets P...          OffsetDelete for partitions P of E2E_TOPIC
//	check delete-group                 DeleteGroups for E2E_GROUP
//	check delete-records P OFFSET      DeleteRecords of E2E_TOPIC's partition P before OFFSET, printing the low watermark
//	check stable-offsets               E2E_GROUP's offsets of E2E_TOPIC's E2E_PARTITIONS partitions, fetched
//	                                   with require_stable, printed as "p:offset ..." (nothing: none)
//
// With E2E_GROUP_PROTOCOL=consumer the group is one of the consumer group protocol (KIP-848):
// wait-group and admin describe it with ConsumerGroupDescribe, which answers GROUP_ID_NOT_FOUND
// for a classic group, so a client that fell back to the classic protocol never gets the group
// to the awaited state.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"kaas/e2e/franz"
	"kaas/e2e/scenario"
)

func main() {
	env := scenario.FromEnv("check")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	out, err := run(ctx, env, os.Args[1:])
	cancel()
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if out != "" {
		fmt.Println(out)
	}
}

func run(ctx context.Context, env scenario.Env, args []string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("usage: check create-topic|wait-group|wait-committed|committed-now|consumed|admin|delete-offsets|delete-group|delete-records|stable-offsets")
	}
	c, err := franz.New(env, franz.Options{ServerSide: os.Getenv("E2E_GROUP_PROTOCOL") == "consumer"})
	if err != nil {
		return "", err
	}
	defer c.Close()
	switch args[0] {
	case "create-topic":
		return "", c.CreateTopic(ctx, env.Topic, env.Partitions)
	case "wait-group":
		if len(args) != 3 {
			return "", errors.New("usage: check wait-group STATE N")
		}
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return "", err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return "", scenario.WaitGroup(wctx, c, env.Group, args[1], n)
	case "wait-committed":
		end, err := c.EndOffsets(ctx, env.Topic)
		if err != nil {
			return "", fmt.Errorf("list end offsets: %w", err)
		}
		return "", scenario.WaitCommitted(ctx, c, env, end)
	case "committed-now":
		return "", committedNow(ctx, c, env)
	case "consumed":
		return consumed(ctx, c, env, args[1:])
	case "admin":
		end, err := c.EndOffsets(ctx, env.Topic)
		if err != nil {
			return "", fmt.Errorf("list end offsets: %w", err)
		}
		return scenario.Administer(ctx, env, c, end)
	case "delete-offsets":
		var ps []int32
		for _, a := range args[1:] {
			p, err := strconv.Atoi(a)
			if err != nil {
				return "", err
			}
			ps = append(ps, int32(p))
		}
		return "", c.DeleteOffsets(ctx, env.Group, env.Topic, ps)
	case "delete-group":
		return "", c.DeleteGroup(ctx, env.Group)
	case "delete-records":
		if len(args) != 3 {
			return "", errors.New("usage: check delete-records P OFFSET")
		}
		p, err1 := strconv.ParseInt(args[1], 10, 32)
		at, err2 := strconv.ParseInt(args[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		low, err := c.DeleteRecords(ctx, env.Topic, map[int32]int64{int32(p): at})
		if err != nil {
			return "", fmt.Errorf("delete records of %s partition %d before %d: %w", env.Topic, p, at, err)
		}
		return strconv.FormatInt(low[int32(p)], 10), nil
	case "stable-offsets":
		got, err := c.StableOffsets(ctx, env.Group, env.Topic, env.Partitions)
		if err != nil {
			return "", fmt.Errorf("fetch %s's offsets with require_stable: %w", env.Group, err)
		}
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(got)) {
			parts = append(parts, fmt.Sprintf("%d:%d", p, got[p]))
		}
		return strings.Join(parts, " "), nil
	}
	return "", fmt.Errorf("unknown command %q", args[0])
}

// committedNow checks, right after a broker restart, that the commits acknowledged before
// it are all there: the group had committed up to the log end, and nothing was consumed
// since. It retries only while the broker does not answer yet.
func committedNow(ctx context.Context, c *franz.Client, env scenario.Env) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		end, err := c.EndOffsets(ctx, env.Topic)
		var got map[int32]int64
		if err == nil {
			got, err = c.FetchOffsets(ctx, env.Group, env.Topic)
		}
		if err == nil {
			if !maps.Equal(got, end) {
				return fmt.Errorf("committed offsets after the broker restart %v, want the log end %v committed before it", got, end)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fetch offsets after the broker restart: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consumed feeds the consumers' output files to a Tracker and checks that every record
// of the log is there.
func consumed(ctx context.Context, c *franz.Client, env scenario.Env, files []string) (string, error) {
	end, err := c.EndOffsets(ctx, env.Topic)
	if err != nil {
		return "", fmt.Errorf("list end offsets: %w", err)
	}
	if err := scenario.CheckEnd(end, env.Partitions, env.Records); err != nil {
		return "", err
	}
	t := scenario.NewTracker(env.Records, end)
	for _, f := range files {
		member := strings.TrimSuffix(f[strings.LastIndex(f, "/")+1:], ".out")
		if err := feed(t, member, f); err != nil {
			return "", err
		}
	}
	if err := t.Check(); err != nil {
		return "", err
	}
	return t.Stats().String(), nil
}

func feed(t *scenario.Tracker, member, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			return fmt.Errorf("%s:%d: %q is not \"partition offset key value\"", file, line, sc.Text())
		}
		p, err1 := strconv.ParseInt(fs[0], 10, 32)
		o, err2 := strconv.ParseInt(fs[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("%s:%d: %w", file, line, err)
		}
		if err := t.Consumed(member, int32(p), o, []byte(fs[2]), []byte(fs[3])); err != nil {
			return fmt.Errorf("%s:%d: %w", file, line, err)
		}
	}
	return sc.Err()
}
