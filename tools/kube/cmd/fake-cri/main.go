// Command fake-cri serves the CRI runtime and image services of k8s.io/cri-client/pkg/fake on a
// unix socket, so a real kubelet runs pods on a machine without a container engine: sandboxes
// and containers exist only in this process's memory, and every container "runs" until stopped.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cri-client/pkg/fake"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///tmp/fake-cri.sock",
		"where to serve the CRI (a unix:// URL; give the kubelet the same one)")
	imageSize := flag.Uint64("image-size", 1<<20,
		"size in bytes reported for every image (0 makes the kubelet fail pods with ImageInspectError)")
	flag.Parse()
	if *imageSize == 0 {
		fmt.Fprintln(os.Stderr, "fake-cri: --image-size must be > 0: the kubelet rejects images of size 0")
		os.Exit(2)
	}

	runtime := fake.NewFakeRemoteRuntime()
	runtime.ImageService.SetFakeImageSize(*imageSize)
	if err := runtime.Start(*endpoint); err != nil {
		fmt.Fprintf(os.Stderr, "fake-cri: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("fake-cri: serving on %s\n", *endpoint)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	runtime.Stop()
}
