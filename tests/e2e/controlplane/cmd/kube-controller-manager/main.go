// Command kube-controller-manager is the upstream Kubernetes controller manager,
// built from the k8s.io/kubernetes module pinned in ../../go.mod. The sandbox
// runs it with only the controllers a scheduling test needs (see
// extender/sandbox/components.py); no cloud provider is linked in.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
