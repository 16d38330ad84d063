#!/usr/bin/env bash
# GPU suite: ONE command for the GPU machine. Builds libgpuslice (make -C native, gcc there) and
# shim_bench (nvcc), runs the GPU tests (tests/gpu, pytest -m gpu) and the overhead benchmark
# (benchmarks/shim_overhead/run.py), and prints a summary table last.
#
# usage: benchmarks/gpu_suite.sh RESULTS_DIR [--tests-only | --bench-only] [-k PYTEST_EXPR]
#   env: TEST_TIMEOUT (s, default 150), BENCH_TIMEOUT (s, default 220), BENCH_REPS (default 15)
# Writes at most 8 files to RESULTS_DIR (the device tool brings back no more): suite.log,
#   env.json, pytest-junit.xml, gpu_tests.jsonl, overhead.json, nvidia-smi-under-gpuslice.txt,
#   summary.md, artifacts.tgz (build logs, pytest log, benchmark log).
# Each phase runs under `timeout`, so a hang in one still leaves the others' results.
# Exit status: 0 when every phase that ran succeeded, 1 otherwise.
set -uo pipefail

usage() { echo "usage: $0 RESULTS_DIR [--tests-only | --bench-only] [-k PYTEST_EXPR]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
RESULTS=$1; shift
RUN_TESTS=1; RUN_BENCH=1; KEXPR=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --tests-only) RUN_BENCH=0 ;;
    --bench-only) RUN_TESTS=0 ;;
    -k) [[ $# -ge 2 ]] || usage; KEXPR=(-k "$2"); shift ;;
    *) usage ;;
  esac
  shift
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d /tmp/gpuslice-suite.XXXXXX)
exec > >(tee -a "$RESULTS/suite.log") 2>&1
cd "$ROOT"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export GPUSLICE_GPU_RESULTS=$RESULTS
STATUS=0
phase() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

phase "machine"
python3 - "$RESULTS/env.json" "$0 $RESULTS${*:+ $*}" <<'EOF'
import json, platform, subprocess, sys, datetime
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as exc:  # a missing tool is a fact to record, not a failure
        return f"unavailable: {exc}"
env = {
    "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S"),
    "gpu": sh("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader -i 0"),
    "driver": sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0"),
    "cuda_driver_api": sh("nvidia-smi | grep -o 'CUDA Version: [0-9.]*'"),
    "nvcc": sh("nvcc --version | tail -2 | head -1"),
    "torch": sh("python3 -c 'import torch; print(torch.__version__, \"cuda\", torch.version.cuda)'"),
    "gcc": sh("gcc --version | head -1"),
    "kernel": platform.release(),
    "cpus": sh("nproc"),
    "native_sources_sha256": sh("find native -type f \\( -name '*.[ch]' -o -name '*.def' -o -name "
                                "'*.in' -o -name Makefile \\) -not -path 'native/build/*' | sort "
                                "| xargs cat | sha256sum | cut -c1-16"),
    "command": sys.argv[2],
}
open(sys.argv[1], "w").write(json.dumps(env, indent=1))
for k, v in env.items():
    print(f"{k}: {v}")
EOF

phase "build libgpuslice (make -C native -B: always rebuild, the machine may keep an old build)"
if make -C native -B -j8 >"$WORK/build-native.log" 2>&1; then
  echo "ok: $(ls -l native/build/libgpuslice.so)"
  BUILT=1
else
  echo "FAILED: make -C native"; tail -40 "$WORK/build-native.log"; BUILT=0; STATUS=1
fi

phase "build shim_bench (nvcc)"
if nvcc -O2 -arch=sm_90 -Xcompiler -Wall,-Wextra -o "$WORK/shim_bench" \
     benchmarks/shim_overhead/shim_bench.cu -ldl >"$WORK/build-bench.log" 2>&1; then
  echo "ok: $WORK/shim_bench"
else
  echo "FAILED: nvcc shim_bench.cu"; tail -40 "$WORK/build-bench.log"; STATUS=1; RUN_BENCH=0
fi

if [[ $RUN_TESTS == 1 && $BUILT == 1 ]]; then
  phase "GPU tests (pytest -m gpu tests/gpu, limit ${TEST_TIMEOUT:-150} s)"
  timeout -k 10 "${TEST_TIMEOUT:-150}" python3 -m pytest -m gpu tests/gpu --confcutdir=tests/gpu \
    -p no:cacheprovider \
    -v -rA --junitxml="$RESULTS/pytest-junit.xml" "${KEXPR[@]}" 2>&1 | tee "$WORK/pytest.log"
  rc=${PIPESTATUS[0]}
  [[ $rc == 0 ]] || { echo "pytest exit status $rc (124 = killed at the time limit)"; STATUS=1; }
fi

if [[ $RUN_BENCH == 1 && $BUILT == 1 ]]; then
  phase "overhead benchmark (limit ${BENCH_TIMEOUT:-220} s)"
  timeout -k 10 "${BENCH_TIMEOUT:-220}" python3 benchmarks/shim_overhead/run.py \
    --bench "$WORK/shim_bench" --lib native/build/libgpuslice.so --out "$RESULTS/overhead.json" \
    --reps "${BENCH_REPS:-15}" 2>&1 | tee "$WORK/bench.log"
  rc=${PIPESTATUS[0]}
  [[ $rc == 0 ]] || { echo "benchmark exit status $rc (124 = killed at the time limit)"; STATUS=1; }
fi

phase "summary"
cp "$RESULTS/suite.log" "$WORK/suite-copy.log" 2>/dev/null
tar czf "$RESULTS/artifacts.tgz" -C "$WORK" --exclude shim_bench . 2>/dev/null
python3 benchmarks/shim_overhead/summarize.py "$RESULTS" | tee "$RESULTS/summary.md"
echo "suite status: $STATUS"
exit $STATUS
