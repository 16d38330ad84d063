# 4 GPUs: the full 2-rank run (GPUs 0,1) and the 4-rank variant, the library at HEAD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git log --oneline -1 2>/dev/null
CUDA_VISIBLE_DEVICES=0,1 COMPUTE_PHASE=1 SM_LIMITS="30 50" ROUND_LIMIT=70 NCCL_ROUNDS="plain compute" BUDGET=300 \
  PHASES="nccl collective" NPROC=2 bash benchmarks/multi_gpu/run.sh $OUT/r2 > $OUT/r2.log 2>&1
echo "r2 rc=$?"; tail -40 $OUT/r2/summary.md
COMPUTE_PHASE=1 SM_LIMITS="30 50" ROUND_LIMIT=70 NCCL_ROUNDS="plain compute" BUDGET=230 \
  PHASES="nccl" NPROC=4 CAPS="24Gi 20Gi" bash benchmarks/multi_gpu/run.sh $OUT/r4 > $OUT/r4.log 2>&1
echo "r4 rc=$?"; tail -30 $OUT/r4/summary.md
