#!/bin/bash
# e2e_bench --compare, one round each, the product code alternated: this checkout and the
# baseline worktree $1 (e.g. git worktree add /tmp/wt-old 9047cce); raw JSON beside this file
cd "$(dirname "$0")/../../../.."
out=$(dirname "$0")
for i in 1 2 3; do
  for code in new old; do
    src=$PWD/src; [ $code = old ] && src=$1/src
    PYTHONPATH=$src KUBEBUILDER_ASSETS=$PWD/tools/kube/bin PATH=$PWD/.cache/tools/bin:$PATH \
      python3 benchmarks/e2e_bench.py --compare --rounds 1 --nodes 100 --pods 2000 --json \
      > $out/ab-$code-$i.json
  done
done
