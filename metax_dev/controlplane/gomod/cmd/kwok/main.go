// Command kwok is upstream's kwok controller main (sigs.k8s.io/kwok): it
// simulates nodes and marks the pods bound to them Running, for the MetaX
// operator's loopback test control plane.
//
// The kwok controller refuses to start without Stage objects, and the default
// ones live in kwok's own module. "kwok default-stages" prints them (node
// initialize, node heartbeat with lease, pod ready/complete/delete) as a
// multi-document YAML, so the launcher's config always matches this kwok
// version instead of carrying a copy.
package main

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeatwithlease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

func defaultStages() string {
	docs := []string{
		nodefast.DefaultNodeInit,
		nodeheartbeatwithlease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for i, d := range docs {
		docs[i] = strings.TrimSpace(d) + "\n"
	}
	return strings.Join(docs, "---\n")
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "default-stages" {
		_, _ = os.Stdout.WriteString(defaultStages())
		return
	}

	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, flagset)

	ctx, err := config.InitFlags(ctx, flagset)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flagset.FlagUsages()))
		logger.Error("Init config flags", "err", err)
		os.Exit(1)
	}

	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		os.Exit(1)
	}
}
