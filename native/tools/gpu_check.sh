#!/bin/bash
# Real-GPU checks for libgpuslice, one script for one device-tool call (DESIGN §5):
#   bash native/tools/gpu_check.sh        (repo root; logs under $OUT, summary on stdout)
# Builds with gcc (no zig there), then: granularity + context footprint (no library), caps through
# every hooked path (C probe), alloc/free and launch overhead, PyTorch under a 4 GiB cap with the
# default, cudaMallocAsync and expandable_segments allocators, two processes sharing one region,
# nvidia-smi and `gpuslice top` under the library. Not CI.
set -u
OUT=${OUT:-/tmp/gpuslice-gpu-out}
mkdir -p "$OUT"
ROOT=$(pwd)
LIB=$ROOT/native/build/libgpuslice.so
T=/tmp/gscheck
mkdir -p $T
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$ROOT/src
PROBE="python3 $ROOT/native/tools/gpu_torch_probe.py"
step() { echo; echo "== $*"; }
under() { # under LIMIT REGION cmd...: run cmd with the library, a limit and a region
  local lim=$1 reg=$2; shift 2
  env LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_LIMIT=$lim CUDA_DEVICE_MEMORY_SHARED_CACHE=$reg "$@"
}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__)'

step "build (gcc)"
make -C native ZIG= -j8 > $OUT/build.log 2>&1 && python3 -m pytest -q -p no:cacheprovider tests/native/unit >> $OUT/build.log 2>&1; tail -1 $OUT/build.log; true 
[ -f $LIB ] || { tail -30 $OUT/build.log; exit 1; }
ls -l $LIB; readelf -d $LIB | grep NEEDED
gcc -O2 -Wall -I/usr/local/cuda/include native/tools/gpu_probe.c -o $T/probe -L/usr/local/cuda/lib64/stubs -lcuda -ldl \
  || exit 1
cat > $T/launch.cu <<'CU'
#include <cstdio>
#include <chrono>
__global__ void empty() {}
int main() {
  for (int i = 0; i < 1000; i++) empty<<<1, 1>>>();
  cudaDeviceSynchronize();
  double best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100000; i++) empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 100000;
    if (us < best) best = us;
  }
  printf("launch empty kernel best_of_5 us_per_launch=%.4f\n", best);
}
CU
nvcc -O2 -o $T/launch $T/launch.cu >> $OUT/build.log 2>&1 || tail -5 $OUT/build.log

step "granularity and context footprint (no library)"
$T/probe gran
$T/probe ctx
PROBE_MAX_CHUNKS=4 timeout 90 $PROBE native-torch-no-library

step "interception: dlsym + caps through every path (C probe, 4 GiB)"
under 4GiB $T/r0 $T/probe dlsym
under 4GiB $T/r1 $T/probe cap 2>$OUT/cap.stderr; grep -c "over limit" $OUT/cap.stderr | sed 's/^/refusal log lines: /'
head -2 $OUT/cap.stderr

step "overhead: 1 MiB cuMemAlloc+cuMemFree and empty launches (native / library no limit / library 70 GiB)"
for i in 1 2; do
  $T/probe bench 5000 | sed 's/^/native   /'
  LD_PRELOAD=$LIB CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/rb0 $T/probe bench 5000 | sed 's/^/nolimit  /'
  under 70GiB $T/rb1 $T/probe bench 5000 | sed 's/^/limit    /'
done
for i in 1 2; do
  $T/launch | sed 's/^/native   /'
  LD_PRELOAD=$LIB $T/launch | sed 's/^/nolimit  /'
  under 70GiB $T/rl $T/launch | sed 's/^/limit    /'
done

step "PyTorch under a 4 GiB cap"
LIBCUDA_LOG_LEVEL=4 PROBE_MAX_CHUNKS=1 under 4GiB $T/rdbg timeout 90 $PROBE debug-log >/dev/null 2>$OUT/torch-debug.stderr
grep -c "cuGetProcAddress.*gpuslice handler" $OUT/torch-debug.stderr | sed "s/^/procaddr substitutions: /"
grep -c "dlsym.*gpuslice handler" $OUT/torch-debug.stderr | sed "s/^/dlsym substitutions: /"
grep "gpuslice handler" $OUT/torch-debug.stderr | sed 's/.*D //' | sort | uniq -c | sort -rn | head -12
grep -c "driver.s own" $OUT/torch-debug.stderr | sed "s/^/procaddr not substituted: /"; grep "driver.s own" $OUT/torch-debug.stderr | head -5
grep "context footprint\|reconcile" $OUT/torch-debug.stderr
under 4GiB $T/rt1 timeout 90 $PROBE default 2>$OUT/torch.stderr; tail -2 $OUT/torch.stderr
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync under 4GiB $T/rt2 timeout 90 $PROBE cudaMallocAsync 2>>$OUT/torch.stderr
tail -2 $OUT/torch.stderr
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True under 4GiB $T/rt3 timeout 90 $PROBE expandable 2>>$OUT/torch.stderr
tail -2 $OUT/torch.stderr

step "two processes, one region (4 GiB): A holds 2 GiB, B takes the rest; nvidia-smi + top meanwhile"
PROBE_MAX_CHUNKS=8 under 4GiB $T/rs timeout 90 $PROBE A-holds-2GiB 25 > $T/a.json 2>$OUT/ab.stderr &
APID=$!
for i in $(seq 1 60); do [ -s $T/a.json ] && break; sleep 0.5; done
cat $T/a.json
under 4GiB $T/rs timeout 90 $PROBE B-rest 2>>$OUT/ab.stderr
under 4GiB $T/rs nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv
nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv | sed 's/^/no library: /'
under 4GiB $T/rs nvidia-smi | head -12 > $OUT/nvidia-smi-under-library.txt
python3 -c 'import sys; from gpuslice.cli import main; main()' top --region $T/rs --once --json
kill -9 $(pgrep -f A-holds-2GiB | head -5) 2>/dev/null; wait $APID 2>/dev/null
sleep 0.3
python3 -c 'import sys; from gpuslice.cli import main; main()' top --region $T/rs --once --json | sed 's/^/after A killed: /'

step "invalid env and no-limit pass-through with PyTorch"
CUDA_DEVICE_MEMORY_LIMIT=4GB LD_PRELOAD=$LIB timeout 60 python3 -c "import torch; torch.zeros(1, device='cuda')" 2>&1 | grep -v "^ " | tail -3
LD_PRELOAD=$LIB timeout 60 python3 -c "import torch; print('no limit mem_get_info MiB', [x >> 20 for x in torch.cuda.mem_get_info()])"

step "gpuslice run (CLI) --gpu-memory 2GiB"
python3 -c 'import sys; from gpuslice.cli import main; main()' run --gpu-memory 2GiB -- timeout 90 $PROBE cli-run-2GiB \
  2>$OUT/cli.stderr; echo "exit=$?"; tail -2 $OUT/cli.stderr
echo done
