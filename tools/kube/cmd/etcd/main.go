// Command etcd is the real etcd server (go.etcd.io/etcd/server/v3) with etcd's own command
// line, built here because Debian ships only etcd 3.4 and no registry ships a binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
