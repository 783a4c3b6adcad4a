package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"kaas/auth"
	"kaas/storage"
)

// usersHelp is the usage of `kaas users`.
const usersHelp = `Usage: kaas users set NAME [--data.dir DIR] [--mechanisms SCRAM-SHA-256,SCRAM-SHA-512] [--iterations 4096] [--password-file FILE]
       kaas users delete NAME [--data.dir DIR]
       kaas users list [--data.dir DIR]

Changes <data.dir>/__cluster/users.json, the SASL users every broker of the cluster reads
(running brokers take the change up). set reads the password from the first line of
standard input (or of --password-file, as a mounted Secret gives it to a container without
a shell), so it appears in no process list or shell history; the file keeps only
SCRAM salts, iterations and derived keys. --data.dir defaults to KAAS_DATA_DIR, then ./data.`

// usersMain runs `kaas users ...`; exit 0 done, 1 failed, 2 usage.
func usersMain(args []string, getenv func(string) string, in io.Reader, out, errOut io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(errOut, usersHelp)
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("kaas users", flag.ContinueOnError)
	fs.SetOutput(errOut)
	dataDir := getenv("KAAS_DATA_DIR")
	if dataDir == "" {
		dataDir = "./data"
	}
	fs.StringVar(&dataDir, "data.dir", dataDir, "the broker's data directory")
	mechs := fs.String("mechanisms", auth.ScramSHA256+","+auth.ScramSHA512, "SCRAM mechanisms to set")
	iters := fs.Int("iterations", auth.MinIterations, "SCRAM iterations (4096-16384)")
	passFile := fs.String("password-file", "", "read the password from this file instead of standard input")
	// The name comes first or after the flags.
	rest := args[1:]
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	creds, err := auth.NewCredentials(auth.CredentialsConfig{Dir: filepath.Join(dataDir, "__cluster"), FS: storage.OSFS{}, Log: zerolog.Nop()})
	if err != nil {
		fmt.Fprintf(errOut, "kaas users: %v\n", err)
		return 1
	}
	switch cmd {
	case "list":
		for _, u := range creds.Describe(nil) {
			parts := make([]string, len(u.Mechanisms))
			for i, m := range u.Mechanisms {
				parts[i] = fmt.Sprintf("%s(%d)", m, u.Iterations[i])
			}
			fmt.Fprintf(out, "%s\t%s\n", u.User, strings.Join(parts, ","))
		}
		return 0
	case "set", "delete":
	default:
		fmt.Fprintln(errOut, usersHelp)
		return 2
	}
	if name == "" {
		fmt.Fprintln(errOut, "kaas users: a user name is needed")
		return 2
	}
	var changes []auth.Change
	if cmd == "delete" {
		for _, m := range auth.ScramMechanisms {
			if _, ok := creds.Lookup(name, m); ok {
				changes = append(changes, auth.Change{User: name, Mechanism: m})
			}
		}
		if len(changes) == 0 {
			fmt.Fprintf(errOut, "kaas users: no user %q\n", name)
			return 1
		}
	} else {
		if *iters < auth.MinIterations || *iters > auth.MaxIterations {
			fmt.Fprintln(errOut, "kaas users: --iterations must be between 4096 and 16384")
			return 2
		}
		if *passFile != "" {
			f, err := os.Open(*passFile)
			if err != nil {
				fmt.Fprintf(errOut, "kaas users: %v\n", err)
				return 1
			}
			defer f.Close()
			in = f
		}
		line, err := bufio.NewReader(in).ReadString('\n')
		if err != nil && err != io.EOF {
			fmt.Fprintf(errOut, "kaas users: read password: %v\n", err)
			return 1
		}
		pass := strings.TrimRight(line, "\r\n")
		if pass == "" {
			fmt.Fprintln(errOut, "kaas users: an empty password on standard input")
			return 2
		}
		for _, m := range strings.Split(*mechs, ",") {
			m = strings.TrimSpace(strings.ToUpper(m))
			cr, err := auth.NewCredential(m, pass, *iters)
			if err != nil {
				fmt.Fprintf(errOut, "kaas users: %v\n", err)
				return 2
			}
			changes = append(changes, auth.Change{User: name, Mechanism: m, Credential: &cr})
		}
	}
	if _, err := creds.Alter(changes); err != nil {
		fmt.Fprintf(errOut, "kaas users: %v\n", err)
		return 1
	}
	fmt.Fprintf(out, "%s %s\n", cmd, name)
	return 0
}
