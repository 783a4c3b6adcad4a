// Command kgo runs the e2e scenario with franz-go's kgo: classic consumer groups with
// dynamic, static (-static) or both in one group (-mixed) members and the cooperative-sticky
// or range balancer, or the consumer group protocol (-server-side, KIP-848).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/e2e/franz"
	"kaas/e2e/scenario"
)

func main() {
	balancer := flag.String("balancer", "cooperative-sticky", "cooperative-sticky or range")
	static := flag.Bool("static", false, "give each member a group.instance.id (KIP-345)")
	mixed := flag.Bool("mixed", false, "give every other member a group.instance.id: static and dynamic members in one group")
	serverSide := flag.Bool("server-side", false, "the consumer group protocol (KIP-848): the broker assigns")
	flag.Parse()
	opts := franz.Options{Static: *static, Mixed: *mixed, ServerSide: *serverSide}
	switch *balancer {
	case "cooperative-sticky":
		opts.Balancer = kgo.CooperativeStickyBalancer()
	case "range":
		opts.Balancer = kgo.RangeBalancer()
	default:
		fmt.Fprintf(os.Stderr, "unknown balancer %q\n", *balancer)
		os.Exit(2)
	}
	membership := "dynamic"
	switch {
	case *static:
		membership = "static"
	case *mixed:
		membership = "static and dynamic"
	}
	name := fmt.Sprintf("kgo (%s, %s members)", *balancer, membership)
	if *serverSide {
		name = fmt.Sprintf("kgo (consumer group protocol, KIP-848, %s, %s members)", *balancer, membership)
	}
	if m := os.Getenv("E2E_SASL_MECHANISM"); m != "" {
		name += fmt.Sprintf(" over SASL %s as %s, authorized by ACLs", m, os.Getenv("E2E_SASL_USER"))
	}
	scenario.Main(name, func(env scenario.Env) (scenario.Client, error) { return franz.New(env, opts) })
}
