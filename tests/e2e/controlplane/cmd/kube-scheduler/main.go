// Command kube-scheduler is the upstream Kubernetes scheduler, built from the
// k8s.io/kubernetes module pinned in ../../go.mod, with no out-of-tree
// plugins: Muster talks to it only as an HTTP extender.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
