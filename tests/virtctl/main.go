// virtctl-harness: KubeVirt v1.9.0's own virtctl commands, imported from the kubevirt.io/kubevirt
// module and run with the arguments given, so bins/virt-handler/tests/virtctl.rs drives kvrs's
// virt-api and virt-handler with exactly virtctl's client code paths:
//
//	virtctl-harness --kubeconfig K pause vmi X -n NS
//	virtctl-harness --kubeconfig K console X -n NS
//	virtctl-harness --kubeconfig K vnc X --proxy-only -n NS
//	virtctl-harness --kubeconfig K migrate X -n NS
//	virtctl-harness --kubeconfig K expand --vm X -n NS -o json
//	virtctl-harness --kubeconfig K soft-reboot X -n NS
//	virtctl-harness --kubeconfig K addvolume X --volume-name=CLAIM -n NS
//	virtctl-harness --kubeconfig K removevolume X --volume-name=CLAIM -n NS
//
// The root command is assembled here rather than taken from pkg/virtctl's NewVirtctlCommand:
// that one also links virtctl's template commands, whose virt-template modules the module proxy
// this repository builds against does not serve (scripts/virtctl-harness.sh). The root is set up
// as NewVirtctlCommand sets it up (the client-config flags and context, the verbosity flag, the
// template functions the subcommands' help uses); the subcommands are virtctl's own
// constructors, unchanged.
package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"kubevirt.io/client-go/kubecli"
	"kubevirt.io/client-go/log"

	"kubevirt.io/kubevirt/pkg/virtctl/clientconfig"
	"kubevirt.io/kubevirt/pkg/virtctl/console"
	"kubevirt.io/kubevirt/pkg/virtctl/pause"
	"kubevirt.io/kubevirt/pkg/virtctl/softreboot"
	"kubevirt.io/kubevirt/pkg/virtctl/unpause"
	"kubevirt.io/kubevirt/pkg/virtctl/vm"
	"kubevirt.io/kubevirt/pkg/virtctl/vnc"
)

const programName = "virtctl"

func newRoot() *cobra.Command {
	cobra.AddTemplateFunc("ProgramName", func() string { return programName })
	cobra.AddTemplateFunc("prepare", func(s string) string {
		return strings.ReplaceAll(s, "{{ProgramName}}", programName)
	})
	root := &cobra.Command{
		Use:           programName,
		Short:         "KubeVirt v1.9.0's virtctl commands, for kvrs's tests",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// client-go/log registers -v on the default flag set; virtctl's root re-adds it.
	if f := flag.CommandLine.Lookup("v"); f != nil {
		root.PersistentFlags().AddFlag(pflag.PFlagFromGoFlag(f))
	}
	root.SetOut(os.Stdout)
	root.SetContext(clientconfig.NewContext(
		context.Background(), kubecli.DefaultClientConfig(root.PersistentFlags()),
	))
	root.AddCommand(
		console.NewCommand(),
		vnc.NewCommand(),
		vm.NewStartCommand(),
		vm.NewStopCommand(),
		vm.NewRestartCommand(),
		vm.NewGuestOsInfoCommand(),
		vm.NewMigrateCommand(),
		vm.NewExpandCommand(),
		vm.NewAddVolumeCommand(),
		vm.NewRemoveVolumeCommand(),
		pause.NewCommand(),
		unpause.NewCommand(),
		softreboot.NewSoftRebootCommand(),
	)
	return root
}

func main() {
	log.InitializeLogging(programName)
	cmd := newRoot()
	if err := cmd.Execute(); err != nil {
		cmd.PrintErrln(err)
		os.Exit(1)
	}
}
