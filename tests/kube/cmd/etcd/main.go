// Command etcd is the etcd server from go.etcd.io/etcd/server/v3, built at the version
// Kubernetes 1.36 uses (etcd's server module has no main package of its own).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
