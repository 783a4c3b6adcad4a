package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Exit codes a script can test.
const (
	exitOK     = 0 // every operation succeeded
	exitFailed = 1 // an operation failed: the cluster was unreachable, or a Kafka error for a group, topic or partition
	exitUsage  = 2 // the command line is wrong; nothing was sent
)

// Commands names the subcommands for the broker's own --help.
const Commands = `Subcommands (run one with --help for its flags):
  kaas groups list | describe | lag | reset-offsets | delete-offsets | delete | probe
  kaas topics list | describe | create | delete | alter-config | delete-records
  kaas transactions list | describe | describe-producers | abort`

// verb is one subcommand: its flags, and what it does once they are parsed.
type verb struct {
	name, synopsis string
	flags          func(fs *flag.FlagSet) action
}

// action is a verb with its flags declared: check validates them once parsed (a usage
// error sends nothing), run does the work.
type action struct {
	check func() error
	run   func(*cmd) error
}

// cmd is one run of a verb: the common flags, the client, the output.
type cmd struct {
	what      string // "groups list": the prefix of every error line
	bootstrap string
	timeout   time.Duration
	json      bool
	stdout    io.Writer
	stderr    io.Writer

	adm    *kadm.Client
	cl     *kgo.Client // for a request kadm would send to any broker (topics alter-config)
	dialed *dialErrors
	failed bool // an item failed and was reported; the exit code is 1
}

// Main runs one `kaas groups|topics|transactions ...` command with args (args[0] is
// "groups", "topics" or "transactions") and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "kaas: want groups, topics or transactions")
		return exitUsage
	}
	var verbs []verb
	switch args[0] {
	case "groups":
		verbs = groupVerbs
	case "topics":
		verbs = topicVerbs
	case "transactions":
		verbs = txnVerbs
	default:
		fmt.Fprintf(stderr, "kaas: unknown command %q: want groups, topics or transactions\n", bounded(args[0]))
		return exitUsage
	}
	if len(args) < 2 {
		fmt.Fprintf(stderr, "kaas: %s: want a subcommand (kaas %s --help lists them)\n", args[0], args[0])
		return exitUsage
	}
	if a := args[1]; a == "-h" || a == "-help" || a == "--help" || a == "help" {
		fmt.Fprintf(stdout, "Usage: kaas %s <subcommand> [flags]\n\n", args[0])
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, v := range verbs {
			fmt.Fprintf(tw, "  %s\t%s\n", v.name, v.synopsis)
		}
		tw.Flush()
		fmt.Fprintf(stdout, "\nRun `kaas %s <subcommand> --help` for its flags.\n", args[0])
		return exitOK
	}
	for _, v := range verbs {
		if v.name == args[1] {
			return v.run(args[0], args[2:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "kaas: %s: unknown subcommand %q (kaas %s --help lists them)\n", args[0], bounded(args[1]), args[0])
	return exitUsage
}

func (v verb) run(noun string, args []string, stdout, stderr io.Writer) int {
	c := &cmd{what: noun + " " + v.name, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("kaas "+c.what, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.bootstrap, "bootstrap-server", "127.0.0.1:9092", "comma-separated `host:port` list of brokers to connect to")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "how long the whole command may take")
	fs.BoolVar(&c.json, "json", false, "print one JSON document instead of a table")
	act := v.flags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: kaas %s [flags]\n\n%s.\n\nFlags:\n", c.what, v.synopsis)
			var defaults strings.Builder
			fs.SetOutput(&defaults)
			fs.PrintDefaults()
			// Flags are spelled --name, as in Apache's tools (Go's flag package takes both).
			fmt.Fprint(stdout, strings.ReplaceAll("\n"+defaults.String(), "\n  -", "\n  --")[1:])
			return exitOK
		}
		return c.usage(err)
	}
	if fs.NArg() > 0 {
		return c.usage(fmt.Errorf("unexpected argument %q", bounded(fs.Arg(0))))
	}
	if c.timeout <= 0 {
		return c.usage(fmt.Errorf("--timeout %v: want a positive duration", c.timeout))
	}
	var seeds []string
	for _, s := range strings.Split(c.bootstrap, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return c.usage(errors.New("--bootstrap-server is empty"))
	}
	if act.check != nil {
		if err := act.check(); err != nil {
			return c.usage(err)
		}
	}
	c.dialed = &dialErrors{}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("kaas-admin"),
		kgo.DialTimeout(min(c.timeout, 10*time.Second)),
		kgo.RetryTimeout(c.timeout),
		kgo.WithHooks(c.dialed),
	)
	if err != nil {
		return c.usage(fmt.Errorf("--bootstrap-server %q: %w", bounded(c.bootstrap), err))
	}
	defer cl.Close()
	c.cl, c.adm = cl, kadm.NewClient(cl)
	c.adm.SetTimeoutMillis(int32(min(c.timeout, time.Duration(1<<31-1)*time.Millisecond) / time.Millisecond))
	if err := act.run(c); err != nil {
		c.fail("", c.explain(err))
		return exitFailed
	}
	if c.failed {
		return exitFailed
	}
	return exitOK
}

// context is the command's whole time budget.
func (c *cmd) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

func (c *cmd) usage(err error) int {
	fmt.Fprintf(c.stderr, "kaas: %s: %s (kaas %s --help)\n", c.what, oneLine(err.Error()), c.what)
	return exitUsage
}

// fail reports one failed operation (about names the group, topic or partition) and
// makes the exit code 1.
func (c *cmd) fail(about string, err error) {
	c.failed = true
	what := c.what
	if about != "" {
		what += " " + about
	}
	fmt.Fprintf(c.stderr, "kaas: %s: %s\n", what, oneLine(err.Error()))
}

// explain turns a request that never got an answer into the reason: the last dial error
// to the bootstrap servers, rather than a bare context deadline.
func (c *cmd) explain(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) || isNetErr(err) {
		if last := c.dialed.last(); last != nil {
			return fmt.Errorf("no answer from %s within %v: %w", c.bootstrap, c.timeout, last)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no answer from %s within %v", c.bootstrap, c.timeout)
		}
	}
	return err
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// dialErrors keeps the last failed connection attempt (kgo's OnBrokerConnect hook).
type dialErrors struct {
	mu  sync.Mutex
	err error
}

func (d *dialErrors) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		return
	}
	d.mu.Lock()
	d.err = err
	d.mu.Unlock()
}

func (d *dialErrors) last() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// table prints rows under header, aligned like Apache's tools.
func (c *cmd) table(header []string, rows [][]string) {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// document prints v as one JSON document.
func (c *cmd) document(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return nil
}

// errText is an error for a table cell or a JSON field: "" when nil, one line.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return oneLine(err.Error())
}

// withMessage adds a response's error message to its error code.
func withMessage(err error, msg string) error {
	if err == nil || strings.TrimSpace(msg) == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.TrimSpace(msg))
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// bounded cuts an argument echoed in an error to a readable size.
func bounded(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func itoa[T int | int16 | int32 | int64](v T) string { return strconv.FormatInt(int64(v), 10) }

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// topicArg is one --topic value: a topic, or topic:p,q for some of its partitions.
type topicArg struct {
	topic      string
	partitions []int32 // nil: every partition
}

func parseTopics(vals []string) ([]topicArg, error) {
	var out []topicArg
	for _, v := range vals {
		name, parts, found := strings.Cut(v, ":")
		if name == "" {
			return nil, fmt.Errorf("--topic %q: want topic or topic:partition,partition", bounded(v))
		}
		ta := topicArg{topic: name}
		if found {
			for _, p := range strings.Split(parts, ",") {
				n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("--topic %q: partition %q is not a partition number", bounded(v), bounded(p))
				}
				ta.partitions = append(ta.partitions, int32(n))
			}
		}
		out = append(out, ta)
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
