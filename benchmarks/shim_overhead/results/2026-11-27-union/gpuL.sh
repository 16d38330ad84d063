# one GPU: union without queue-on. v2 (working tree: peers charged by the union, not corrected) / v1 (peers also corrected) / base, alternated: two independent processes of one container (gang on), twice; then the IPC pair for v2 and v1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
make -C .before-prog/v1/native ZIG= -B -j8 >/dev/null 2>&1 || { echo v1 build failed; exit 1; }
[ -f .before-prog/base/native/build/libgpuslice.so ] || make -C .before-prog/base/native ZIG= -B -j8 >/dev/null 2>&1 || { echo base build failed; exit 1; }
V2=native/build/libgpuslice.so; BASE=.before-prog/base/native/build/libgpuslice.so; V1=.before-prog/v1/native/build/libgpuslice.so
cp $V2 /tmp/v2.so
acc() { cp $1 native/build/libgpuslice.so; GPUSLICE_COMPUTE_PHASE=1 PYTHONPATH=src:/tmp/site timeout 250 python3 benchmarks/compute_accuracy.py --no-mps --scenarios same-container-2-procs --limits 50 --out $OUT/acc-$2 > $OUT/acc-$2.log 2>&1; grep "^same-container" $OUT/acc-$2.log | sed "s/^/[$2] /"; }
for i in 1 2; do acc /tmp/v2.so v2-$i; acc $V1 v1-$i; acc $BASE base-$i; done
cp /tmp/v2.so native/build/libgpuslice.so
cc() { PYTHONPATH=src:/tmp/site timeout 150 python3 benchmarks/multi_gpu/collective_caps.py --placements one-gpu --steps 2000 --disguised-seconds 0 --timeout 120 "$@" 2>&1 | grep "one-gpu gpuslice"; }
cc --lib /tmp/v2.so --limits 30,50 --out $OUT/pair-v2 | sed "s/^/[pair v2] /"
cc --lib $V1 --limits 30,50 --out $OUT/pair-v1 | sed "s/^/[pair v1] /"
