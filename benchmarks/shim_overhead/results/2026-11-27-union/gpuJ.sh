# one GPU: accuracy, new (union + queue on) against base (HEAD before): two independent processes of one container (gang on, as the node agent sets), then solo single-tenant figures
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
[ -f native/build/libgpuslice.so ] || make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
[ -f .before-prog/base/native/build/libgpuslice.so ] || make -C .before-prog/base/native ZIG= -B -j8 >/dev/null 2>&1 || { echo base build failed; exit 1; }
BASE=.before-prog/base/native/build/libgpuslice.so
GPUSLICE_COMPUTE_PHASE=1 PYTHONPATH=src:/tmp/site timeout 250 python3 benchmarks/compute_accuracy.py --no-mps --scenarios same-container-2-procs --limits 50 --before-lib $BASE --out $OUT/acc-same > $OUT/acc-same.log 2>&1; echo "same rc=$?"; tail -12 $OUT/acc-same.log
PYTHONPATH=src:/tmp/site timeout 300 python3 benchmarks/compute_accuracy.py --no-mps --scenarios solo --limits 30,70 --before-lib $BASE --out $OUT/acc-solo > $OUT/acc-solo.log 2>&1; echo "solo rc=$?"; tail -25 $OUT/acc-solo.log
