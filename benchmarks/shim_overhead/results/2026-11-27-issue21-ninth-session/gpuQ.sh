# 2 GPUs, traced: the 2-rank NCCL + DDP round at 50 %, to see the holds furthest past owed
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
TRACE=1 COMPUTE_PHASE=1 SM_LIMIT=50 ROUND_LIMIT=70 NCCL_ROUNDS="plain compute" BUDGET=200 \
  PHASES="nccl" NPROC=2 bash benchmarks/multi_gpu/run.sh $OUT/t2 > $OUT/t2.log 2>&1
echo "t2 rc=$?"; grep -E "caps\+compute|plain \(" $OUT/t2/summary.md; sed -n '/furthest past/,/^## /p' $OUT/t2/traces.md | head -60
