# one GPU: peers no longer corrected (union instead). Two independent processes of one container (gang on): new / uonly (no queue-on) / base; then the IPC pair, new and uonly
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
make -C .before-prog/uonly/native ZIG= -B -j8 >/dev/null 2>&1 || { echo uonly build failed; exit 1; }
[ -f .before-prog/base/native/build/libgpuslice.so ] || make -C .before-prog/base/native ZIG= -B -j8 >/dev/null 2>&1 || { echo base build failed; exit 1; }
NEW=native/build/libgpuslice.so; BASE=.before-prog/base/native/build/libgpuslice.so; UONLY=.before-prog/uonly/native/build/libgpuslice.so
GPUSLICE_COMPUTE_PHASE=1 PYTHONPATH=src:/tmp/site timeout 250 python3 benchmarks/compute_accuracy.py --no-mps --scenarios same-container-2-procs --limits 50 --before-lib $BASE --out $OUT/acc-same > $OUT/acc-same.log 2>&1; echo "same rc=$?"; grep -A4 "^scenario" $OUT/acc-same.log
cp -r native/build /tmp/newbuild; cp $UONLY native/build/libgpuslice.so
GPUSLICE_COMPUTE_PHASE=1 PYTHONPATH=src:/tmp/site timeout 250 python3 benchmarks/compute_accuracy.py --no-mps --scenarios same-container-2-procs --limits 50 --out $OUT/acc-same-uonly > $OUT/acc-same-uonly.log 2>&1; echo "same uonly rc=$?"; grep -A4 "^scenario" $OUT/acc-same-uonly.log
cp /tmp/newbuild/libgpuslice.so native/build/libgpuslice.so
cc() { PYTHONPATH=src:/tmp/site timeout 150 python3 benchmarks/multi_gpu/collective_caps.py --placements one-gpu --steps 2000 --disguised-seconds 0 --timeout 120 "$@" 2>&1 | grep "one-gpu gpuslice"; }
cc --lib $NEW --limits 30,50 --out $OUT/new-1 | sed "s/^/[new 1] /"
cc --lib $UONLY --limits 30,50 --out $OUT/uonly-1 | sed "s/^/[uonly 1] /"
