cd /work/main
export PATH=$PWD/.cache/tools/bin:$PATH KUBEBUILDER_ASSETS=$PWD/tools/kube/bin
for i in 1 2; do
  for arm in old new; do
    if [ $arm = old ]; then PP=/tmp/wt-old/src; else PP=/work/main/src; fi
    PYTHONPATH=$PP python3 benchmarks/e2e_bench.py --compare --rounds 1 --nodes 100 --pods 2000 --restart --json > results/ab-restart-$arm-$i.json 2>results/ab-restart-$arm-$i.err
    python3 -c "
import json;d=json.load(open('results/ab-restart-$arm-$i.json'));r=d['rounds'][0]
print('$arm $i', d['ratios'], r['plain']['pods_per_s'], r['gpuslice']['pods_per_s'], d['overcommitted_gpus'], r['gpuslice']['bound_without_assignment'], r['gpuslice']['cpu_ms_per_pod'], flush=True)"
  done
done
