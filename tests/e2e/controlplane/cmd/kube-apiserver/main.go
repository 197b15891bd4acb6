// Command kube-apiserver is the upstream Kubernetes API server, built from the
// k8s.io/kubernetes module pinned in ../../go.mod. Muster uses it only as a
// local, loopback-only control plane for the sandbox, demo and e2e tests.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zone support, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
