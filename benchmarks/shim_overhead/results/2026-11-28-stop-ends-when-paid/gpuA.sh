# 4x H100, call A: the gang's stop ends once its debts are paid (gang.c), 2 ranks traced on GPUs 0,1;
# meanwhile on GPU 2 two independent processes of one container (gang on) against the base library
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
make -C .before-prog/base/native ZIG= -B -j8 >/dev/null 2>&1 || { echo base build failed; exit 1; }
BASE=$PWD/.before-prog/base/native/build/libgpuslice.so
( CUDA_VISIBLE_DEVICES=2 GPUSLICE_COMPUTE_PHASE=1 PYTHONPATH=src:/tmp/site timeout 400 python3 benchmarks/compute_accuracy.py \
  --no-mps --scenarios same-container-2-procs --limits 50 --before-lib $BASE --out $OUT/indep > $OUT/indep.log 2>&1; echo "indep rc=$?" >> $OUT/indep.log ) &
CUDA_VISIBLE_DEVICES=0,1 TRACE=1 COMPUTE_PHASE=1 SM_LIMITS="30 50" ROUND_LIMIT=70 NCCL_ROUNDS="plain compute" BUDGET=330 \
  PHASES="nccl collective" NPROC=2 bash benchmarks/multi_gpu/run.sh $OUT/r2 > $OUT/r2.log 2>&1
echo "r2 rc=$?"; tail -45 $OUT/r2/summary.md
mkdir -p /tmp/tr && tar -xJf $OUT/r2/traces.txz -C /tmp/tr 2>/dev/null
for d in $(find /tmp/tr -name "compute-trace.*.tsv" -printf "%h\n" | sort -u); do echo "== $d"; python3 benchmarks/multi_gpu/trace_summary.py $d --split-at gemm | sed -n '/furthest past/,/Longest batches/p' | sed -n 1,10p | cut -d'|' -f2,3,4,5,7,8,12; done
wait; tail -25 $OUT/indep.log
