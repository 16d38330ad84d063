# 2x H100, call D, against the library before this session (972444a): one process alone on GPU 0,
# two independent processes of one container (gang on) on GPU 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
make -C .before-prog/base/native ZIG= -B -j8 >/dev/null 2>&1 || { echo base build failed; exit 1; }
BASE=$PWD/.before-prog/base/native/build/libgpuslice.so
( CUDA_VISIBLE_DEVICES=1 GPUSLICE_COMPUTE_PHASE=1 PYTHONPATH=src:/tmp/site timeout 400 python3 benchmarks/compute_accuracy.py \
  --no-mps --scenarios same-container-2-procs --limits 50 --before-lib $BASE --out /tmp/indep > $OUT/indep.log 2>&1; echo "indep rc=$?" >> $OUT/indep.log ) &
CUDA_VISIBLE_DEVICES=0 PYTHONPATH=src:/tmp/site timeout 400 python3 benchmarks/compute_accuracy.py \
  --no-mps --scenarios solo --limits 30,70 --before-lib $BASE --out /tmp/solo > $OUT/solo.log 2>&1; echo "solo rc=$?" >> $OUT/solo.log
wait; tail -6 $OUT/indep.log; tail -12 $OUT/solo.log
