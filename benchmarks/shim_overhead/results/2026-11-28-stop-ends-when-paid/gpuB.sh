# 4x H100, call B: the 4-rank variant traced, then the issue-21 GPU tests on GPUs 0,1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
TRACE=1 COMPUTE_PHASE=1 SM_LIMITS="30 50" ROUND_LIMIT=70 NCCL_ROUNDS="plain compute" BUDGET=260 \
  PHASES="nccl" NPROC=4 CAPS="24Gi 20Gi" bash benchmarks/multi_gpu/run.sh /tmp/r4 > /tmp/r4.log 2>&1
echo "r4 rc=$?"; cp /tmp/r4/summary.md $OUT/r4-summary.md; cp /tmp/r4/traces.md $OUT/r4-traces.md; cp /tmp/r4/nccl.json $OUT/r4-nccl.json
grep -E "caps\+compute-[0-9]+ \(4 ranks\)" /tmp/r4/summary.md
mkdir -p /tmp/tr && tar -xJf /tmp/r4/traces.txz -C /tmp/tr 2>/dev/null
for d in $(find /tmp/tr -name "compute-trace.*.tsv" -printf "%h\n" | sort -u); do echo "== $d"; python3 benchmarks/multi_gpu/trace_summary.py $d --split-at gemm | sed -n '/furthest past/,/Longest batches/p' | sed -n 1,10p | cut -d'|' -f2,3,4,5,7,8,12; done > $OUT/r4-past-owed.md
cat $OUT/r4-past-owed.md
CUDA_VISIBLE_DEVICES=0,1 PYTHONPATH=src:/tmp/site timeout 220 python3 -m pytest -m gpu tests/gpu/test_collectives_under_compute_caps.py --confcutdir=tests/gpu -rA -p no:cacheprovider > $OUT/gpu-tests.log 2>&1
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/gpu-tests.log
