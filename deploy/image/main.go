// Command image builds the kaas container image without a container engine: it
// cross-compiles the static broker binary of the module at -src and writes an OCI image
// from scratch holding it, as an OCI image layout (dist/oci) and a tarball `docker load`
// reads (dist/kaas-image.tar), tagged kaas:<version> and kaas:latest. The image is the
// Dockerfile's: /kaas as the entrypoint, user 65532, /data as the volume, listeners on
// every interface. The same source gives the same digest: every timestamp is the commit
// time (or SOURCE_DATE_EPOCH).
//
// It is a module of its own so go-containerregistry stays out of kaas's go.mod.
// `make image` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() { os.Exit(run()) }

func run() int {
	src := flag.String("src", "../..", "the kaas module to build")
	dist := flag.String("out", "../../dist", "where to write oci/ and kaas-image.tar")
	bin := flag.String("binary", "", "image this linux binary instead of building one")
	goarch := flag.String("goarch", "amd64", "GOARCH of the binary built")
	version := flag.String("version", "", "version stamped as kaas/broker.Version (default: the VCS revision)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *bin == "" {
		if err := os.MkdirAll(*dist, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "image: %v\n", err)
			return 1
		}
		*bin = filepath.Join(*dist, "linux_"+*goarch, "kaas")
		if err := Compile(ctx, *src, *bin, *goarch, *version); err != nil {
			fmt.Fprintf(os.Stderr, "image: %v\n", err)
			return 1
		}
	}
	r, err := Assemble(*bin, *dist)
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		return 1
	}
	fmt.Printf("kaas %s linux/%s\n  image   %s\n  tags    %s:%s %s:latest\n  layout  %s\n  tarball %s\n",
		r.Build.Version, r.Build.GOARCH, r.Digest, Repository, r.Build.Tag(), Repository, r.Layout, r.Tarball)
	return 0
}
