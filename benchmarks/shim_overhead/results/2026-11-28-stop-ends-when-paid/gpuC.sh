# 2x H100, call C: the whole 2-GPU run (every phase) with the library at b271cd7
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
BUDGET=520 bash benchmarks/multi_gpu/run.sh /tmp/full > /tmp/full.log 2>&1
echo "full rc=$?"; cp /tmp/full/summary.md $OUT/full-summary.md; cp /tmp/full/run.log $OUT/full-run.log
grep -E "passed|failed" /tmp/full/run.log | tail -3
grep -E "caps\+compute-[0-9]+ \(|same-gpu|gpuslice at|spinning" /tmp/full/summary.md
