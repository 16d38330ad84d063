#!/usr/bin/env bash
# Build the real Kubernetes the test tier runs (KUBEBUILDER_ASSETS): kube-apiserver,
# kube-scheduler, kube-controller-manager, kubelet, kubectl (all of one version, k8s.io/kubernetes
# in go.mod), etcd (go.etcd.io/etcd/server/v3) and fake-cri (k8s.io/cri-client/pkg/fake, so the
# kubelet runs without a container engine). Everything comes from the Go module proxy.
#
#   bash tools/kube/build.sh [OUT]     OUT defaults to tools/kube/bin (git-ignored)
#
# Prints OUT on the last line of stdout, so `export KUBEBUILDER_ASSETS=$(bash tools/kube/build.sh)`
# works. A second run with the same go.mod, go.sum and this script is a no-op (a stamp in OUT);
# the Go build cache ($GOCACHE) makes a rebuild after a change cheap. First build on 2 cores:
# about 7 minutes (docs/development.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
binaries=(etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl fake-cri)

command -v go >/dev/null || { echo "build.sh: no \`go\` on PATH; install Go >= 1.26" >&2; exit 2; }
stamp=$(cat "$here/go.mod" "$here/go.sum" "$0" "$here"/cmd/*/main.go | sha256sum | cut -c1-16)
all_there() { for b in "${binaries[@]}"; do [ -x "$out/$b" ] || return 1; done; }

if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ] || ! all_there; then
  cd "$here"
  k8s=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)         # e.g. v1.36.2
  minor=${k8s#v1.}; minor=${minor%%.*}
  # What a release build stamps (hack/lib/version.sh): without it every binary says v0.0.0.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "build.sh: building Kubernetes $k8s into $out (first build ~7 min on 2 cores)" >&2
  rm -f "$out/.stamp"
  # Pure Go like Kubernetes' own release builds: static, no C toolchain needed.
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/{kube-apiserver,kube-scheduler,kube-controller-manager,kubelet,kubectl} \
    ./cmd/etcd ./cmd/fake-cri
  echo "$stamp" > "$out/.stamp"
fi

for b in kube-apiserver kube-scheduler kube-controller-manager kubelet; do
  echo "$b $("$out/$b" --version | awk '{print $NF}')" >&2
done
echo "kubectl $("$out/kubectl" version --client -o json | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p' | head -1)" >&2
echo "etcd $("$out/etcd" --version | sed -n 's/^etcd Version: //p')" >&2
echo "$out"
