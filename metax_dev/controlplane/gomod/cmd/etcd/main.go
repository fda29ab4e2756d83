// Command etcd starts the etcd server (go.etcd.io/etcd/server/v3/etcdmain)
// for the MetaX operator's loopback test control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
