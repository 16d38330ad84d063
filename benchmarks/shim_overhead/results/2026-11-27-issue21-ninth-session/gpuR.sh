# 2 GPUs, traced again at 30 and 50 %: are the holds past owed still waits on the rank's own stream?
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
TRACE=1 COMPUTE_PHASE=1 SM_LIMITS="30 50" ROUND_LIMIT=70 NCCL_ROUNDS="plain compute" BUDGET=280 \
  PHASES="nccl" NPROC=2 bash benchmarks/multi_gpu/run.sh $OUT/t3 > $OUT/t3.log 2>&1
echo "t3 rc=$?"; grep -E "caps\+compute-[0-9]+ \(2 ranks\)" $OUT/t3/summary.md
mkdir -p /tmp/tr && tar -xJf $OUT/t3/traces.txz -C /tmp/tr
for d in $(find /tmp/tr -name "compute-trace.*.tsv" -printf "%h\n" | sort -u); do echo "== $d"; python3 benchmarks/multi_gpu/trace_summary.py $d | sed -n '/furthest past/,/Longest batches/p' | sed -n 1,12p | cut -d'|' -f2,3,4,7,8,12; done
