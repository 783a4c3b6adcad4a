// Command fakebroker runs franz-go's kfake as a stand-in broker for developing the e2e
// suite (`e2e/run.sh --broker=fake`): the same scenarios against a reference implementation.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 9092, "listen port on 127.0.0.1")
	dataDir := flag.String("data.dir", "", "persist the cluster here so it survives a restart (empty: in memory)")
	flag.Parse()
	opts := []kfake.Opt{kfake.Ports(*port), kfake.AllowAutoTopicCreation()}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir), kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakebroker: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "fakebroker: listening on %v\n", c.ListenAddrs())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	c.Close()
}
