// Command kube-controller-manager is the upstream kube-controller-manager (k8s.io/kubernetes/cmd/kube-controller-manager) built from the Go
// module proxy, with the upstream main's blank imports.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
