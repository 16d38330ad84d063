#!/usr/bin/env bash
# Multi-GPU run (issue 14): ONE command for a machine with 2+ GPUs (bare: nothing built). Installs
# the wheels carried in .whl/ (the machine has no network), builds libgpuslice with gcc, then:
#   1. tests/gpu/test_multi_gpu.py (per-device caps, pinned and reordered processes, = NVML)
#   2. benchmarks/multi_gpu/inventory.py --holder (NVML's view, the agent's inventory and its
#      Allocate for a 2-GPU topology pod, a PyTorch process under that answer)
#   3. benchmarks/multi_gpu/nccl_bench.py under torchrun, one rank per GPU, interleaved rounds:
#      plain, caps (memory caps per GPU), caps+compute (and the compute limit), plain, caps
#   4. summarize.py: summary.md (printed last) and nccl.json.
# usage: benchmarks/multi_gpu/run.sh RESULTS_DIR [--dry-run]
#   --dry-run: a CPU machine's check of this script: the GPU tests skip, inventory.py runs the
#   agent on benchmarks/multi_gpu/fake_gpus.yaml, nccl_bench.py only parses its arguments.
#   env: BUDGET (s, default 450: every phase is cut to what is left of it), NPROC (default 2:
#   ranks and the pod's GPUs; NPROC=1 rehearses every path on a one-GPU machine),
#   CAPS (default "24Gi 20Gi": the caps of GPU 0, 1, ..., repeated for more ranks),
#   SM_LIMIT (default 50)
# Writes at most 8 files to RESULTS_DIR (the device tool brings back no more): run.log, env.json,
#   pytest-junit.xml, gpu_tests.jsonl, inventory.json, nccl.json, summary.md, artifacts.tgz.
# NVLink multicast stays off (device docs): NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
#   NVSHMEM_DISABLE_NVLS=1 for every process started here.
# Exit status: 0 when every phase that ran succeeded, 1 otherwise.
set -uo pipefail

usage() { echo "usage: $0 RESULTS_DIR [--dry-run]" >&2; exit 2; }
[[ $# -ge 1 && $1 != -* ]] || usage
RESULTS=$1; shift
DRY=0
while [[ $# -gt 0 ]]; do
  case $1 in --dry-run) DRY=1 ;; *) usage ;; esac
  shift
done

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # CUDA ordinals = NVML indexes
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/benchmarks/multi_gpu
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d /tmp/gpuslice-mgpu.XXXXXX)
exec > >(tee -a "$RESULTS/run.log") 2>&1
cd "$ROOT"
export PYTHONUNBUFFERED=1 GPUSLICE_GPU_RESULTS=$RESULTS
BUDGET=${BUDGET:-450} NPROC=${NPROC:-2} SM_LIMIT=${SM_LIMIT:-50}
read -r -a CAP_LIST <<<"${CAPS:-24Gi 20Gi}"
STATUS=0 NCCL_RUNS=()
phase() { echo; echo "=== $* ($(date -u +%H:%M:%S), ${SECONDS}s of ${BUDGET}s)"; }
# seconds a phase may take: its own limit, cut to what is left of the budget (0: skip it)
limit() { local left=$((BUDGET - SECONDS - 20)); ((left < 15)) && echo 0 || echo $(($1 < left ? $1 : left)); }
run_limited() {  # run_limited SECONDS NAME CMD...: a phase under `timeout`, its status counted
  local s=$1 name=$2; shift 2
  if [[ $s == 0 ]]; then echo "SKIPPED $name: the ${BUDGET}s budget is spent"; STATUS=1; return; fi
  timeout -k 10 "$s" "$@"
  local rc=$?
  [[ $rc == 0 ]] || { echo "$name: exit status $rc (124 = killed at its ${s}s limit)"; STATUS=1; }
}

phase "wheels from .whl/ (the device machine has no network)"
SITE=$WORK/site
if ls .whl/*.whl >/dev/null 2>&1 && [[ $DRY == 0 ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl && echo "ok: $(ls .whl | tr '\n' ' ')" || STATUS=1
else
  echo "none installed (no .whl/ or --dry-run)"
fi
export PYTHONPATH="$ROOT/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"

phase "machine"
python3 - "$RESULTS/env.json" "$0 $RESULTS" <<'EOF'
import datetime, json, platform, subprocess, sys
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as exc:  # a missing tool is a fact to record
        return f"unavailable: {exc}"
env = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
       "gpus": sh("nvidia-smi --query-gpu=index,name,memory.total,uuid,pci.bus_id --format=csv,noheader"),
       "driver": sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0"),
       "torch": sh("python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'"),
       "kernel": platform.release(), "cpus": sh("nproc"), "head": sh("git rev-parse --short HEAD"),
       "command": sys.argv[2]}
open(sys.argv[1], "w").write(json.dumps(env, indent=1))
for k, v in env.items():
    print(f"{k}: {v}")
EOF
mapfile -t UUIDS < <(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null)
if [[ $DRY == 0 && ${#UUIDS[@]} -lt $NPROC ]]; then
  echo "this machine has ${#UUIDS[@]} GPU(s); the run needs $NPROC (NPROC): GPU phases will fail or skip"
fi

phase "build libgpuslice (gcc: make -C native ZIG= -B)"
BUILT=0
if [[ $DRY == 1 && -f native/build/libgpuslice.so ]]; then
  echo "dry run: the existing build (a rebuild would change the library other work here uses)"
  BUILT=1
elif timeout 180 make -C native ZIG= -B -j8 >"$WORK/build-native.log" 2>&1; then
  echo "ok: $(ls -l native/build/libgpuslice.so)"; BUILT=1
else
  echo "FAILED: make -C native"; tail -40 "$WORK/build-native.log"; STATUS=1
fi

if [[ $BUILT == 1 ]]; then
  phase "1. GPU tests: tests/gpu/test_multi_gpu.py"
  run_limited "$(limit 170)" "GPU tests" python3 -m pytest -m gpu tests/gpu/test_multi_gpu.py \
    --confcutdir=tests/gpu -p no:cacheprovider -v -rA --junitxml="$RESULTS/pytest-junit.xml"

  phase "2. inventory and the agent's Allocate"
  if [[ $DRY == 1 ]]; then INV=(--backend "fake:$HERE/fake_gpus.yaml"); else INV=(--holder); fi
  INV+=(--gpus "$NPROC")
  run_limited "$(limit 90)" "inventory.py" python3 "$HERE/inventory.py" "${INV[@]}" \
    --out "$RESULTS/inventory.json"

  phase "3. NCCL: all-reduce and DDP, $NPROC ranks"
  if [[ $DRY == 1 ]]; then
    run_limited 60 "nccl_bench.py --help" python3 "$HERE/nccl_bench.py" --help
  else
    UUID_LIST=$(IFS=,; echo "${UUIDS[*]:0:$NPROC}")
    round=0
    for label in plain caps caps+compute plain caps; do
      round=$((round + 1))
      out="$WORK/nccl-$round-$label.json"
      envs=()
      if [[ $label != plain ]]; then
        envs=(LD_PRELOAD="$ROOT/native/build/libgpuslice.so"
              CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/region-$round" GPUSLICE_DEVICE_UUIDS="$UUID_LIST")
        for ((i = 0; i < NPROC; i++)); do
          envs+=(CUDA_DEVICE_MEMORY_LIMIT_$i="${CAP_LIST[i % ${#CAP_LIST[@]}]}")
        done
        [[ $label == caps+compute ]] && envs+=(CUDA_DEVICE_SM_LIMIT="$SM_LIMIT")
      fi
      echo "--- round $round: $label ${envs[*]}"
      run_limited "$(limit 100)" "nccl_bench $label" env "${envs[@]}" \
        python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
        "$HERE/nccl_bench.py" --label "$label" --out "$out" >"$WORK/nccl-$round-$label.log" 2>&1
      tail -5 "$WORK/nccl-$round-$label.log"
      [[ -f $out ]] && NCCL_RUNS+=("$out")
    done
  fi
fi

phase "4. summary"
tar czf "$RESULTS/artifacts.tgz" -C "$WORK" --exclude site . 2>/dev/null
python3 "$HERE/summarize.py" "$RESULTS" "${NCCL_RUNS[@]}" | tee "$RESULTS/summary.md"
echo "run status: $STATUS (${SECONDS}s)"
exit $STATUS
