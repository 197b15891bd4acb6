// Command kubectl is the upstream kubectl (k8s.io/kubectl/pkg/cmd) at the same
// release as the control plane, so a person can inspect a Muster sandbox.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // client auth plugins, as upstream
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// Set klog verbosity before the command is built (plugin and .kuberc
	// handling log during construction), as upstream kubectl does.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
