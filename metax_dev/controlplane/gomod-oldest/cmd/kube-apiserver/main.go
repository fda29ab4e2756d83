// Command kube-apiserver is upstream's kube-apiserver main of Kubernetes 1.23, built from the
// k8s.io/kubernetes module for the MetaX operator's compatibility control plane. That module ships
// no pkg/generated/openapi/zz_generated.openapi.go; the build generates it in its cache with 1.23's
// own openapi-gen (metax_dev/controlplane/oldest_source.py, docs/controlplane.md).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
