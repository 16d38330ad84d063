#!/usr/bin/env bash
# Multi-GPU run (issue 14): ONE command for a machine with 2+ GPUs (bare: nothing built). Installs
# the wheels carried in .whl/ (the machine has no network), builds libgpuslice with gcc, then:
#   1. tests/gpu/test_multi_gpu.py (per-device caps, pinned and reordered processes, = NVML)
#   2. benchmarks/multi_gpu/inventory.py --holder (NVML's view, the agent's inventory and its
#      Allocate for a 2-GPU topology pod, a PyTorch process under that answer)
#   3. benchmarks/multi_gpu/nccl_bench.py under torchrun, one rank per GPU, interleaved rounds:
#      plain, caps (memory caps per GPU), caps+compute-L for each L of SM_LIMITS (and that compute
#      limit), plain, caps
#   4. two ranks on ONE GPU (NCCL refuses that: gloo), DDP and all-reduce: plain, then each limit
#   5. benchmarks/multi_gpu/collective_caps.py: kernels that spin on a peer through CUDA IPC, on
#      two GPUs and on one, at each limit (and BEFORE_LIB's, 15 s each: the stall of issue 21)
#   6. summarize.py: summary.md (printed last) and nccl.json.
# usage: benchmarks/multi_gpu/run.sh RESULTS_DIR [--dry-run]
#   --dry-run: a CPU machine's check of this script: the GPU tests skip, inventory.py runs the
#   agent on benchmarks/multi_gpu/fake_gpus.yaml, nccl_bench.py only parses its arguments.
#   env: BUDGET (s, default 450: every phase is cut to what is left of it), NPROC (default 2:
#   ranks and the pod's GPUs; NPROC=4 is the 4-rank variant for a 4-GPU machine; NPROC=1
#   rehearses every path on a one-GPU machine), CAPS (default "24Gi 20Gi": the caps of GPU 0, 1,
#   ..., repeated for more ranks), SM_LIMITS (default "30 50"; SM_LIMIT=N: that one alone),
#   PHASES (default "tests inventory nccl same-gpu collective": which of phases 1-5 run),
#   BEFORE_LIB (an older libgpuslice.so for phase 5's before rounds; none by default),
#   NCCL_ROUNDS (default "plain caps compute plain caps"; compute = one round per limit),
#   COMPUTE_PHASE (GPUSLICE_COMPUTE_PHASE, issue 21's gang holds, in every compute round: 1 or 0;
#   default 1, as the node agent sets it for a container under a compute limit), ROUND_LIMIT (s,
#   default 100: one NCCL round's limit), TRACE (1: every limited process writes
#   GPUSLICE_COMPUTE_TRACE launch traces; trace_summary.py reads them into traces.md, and they
#   come back as traces.txz)
# Writes at most 8 files to RESULTS_DIR (the device tool brings back no more): run.log, env.json,
#   pytest-junit.xml, gpu_tests.jsonl, inventory.json, nccl.json, summary.md, artifacts.tgz
#   (with TRACE=1, traces.md and traces.txz instead of pytest-junit.xml and gpu_tests.jsonl: run
#   it with PHASES without "tests")
#   (collective_caps.json goes into artifacts.tgz and is summarised in summary.md).
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
BUDGET=${BUDGET:-450} NPROC=${NPROC:-2}
read -r -a SM_LIMITS <<<"${SM_LIMIT:-${SM_LIMITS:-30 50}}"
PHASES=" ${PHASES:-tests inventory nccl same-gpu collective} "
wants() { [[ $PHASES == *" $1 "* ]]; }
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

# nccl_round ROUND LABEL RANKS [NCCL_BENCH ARGS...]: one torchrun; LABEL plain = no library,
# caps = memory caps per GPU, caps+compute-L = caps and CUDA_DEVICE_SM_LIMIT=L, same-gpu-* = the
# same with every rank on GPU 0 (one cap, GPU 0's)
nccl_round() {
  local round=$1 label=$2 ranks=$3; shift 3
  local out="$WORK/nccl-$round-$label.json" envs=() n=$NPROC
  [[ $label == same-gpu* ]] && n=1
  if [[ $label != plain && $label != same-gpu-plain ]]; then
    envs=(LD_PRELOAD="$ROOT/native/build/libgpuslice.so" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/region-$round"
          GPUSLICE_DEVICE_UUIDS="$(IFS=,; echo "${UUIDS[*]:0:$n}")")
    for ((i = 0; i < n; i++)); do
      envs+=(CUDA_DEVICE_MEMORY_LIMIT_$i="${CAP_LIST[i % ${#CAP_LIST[@]}]}")
    done
    # gang holds: as the node agent sets them (on under a compute limit), unless COMPUTE_PHASE says
    local phase=${COMPUTE_PHASE:-1}
    [[ $label == *compute-* ]] && envs+=(CUDA_DEVICE_SM_LIMIT="${label##*compute-}"
                                         GPUSLICE_COMPUTE_PHASE="$phase")
    if [[ $label == *compute-* && ${TRACE:-0} == 1 ]]; then
      mkdir -p "$WORK/trace-$round-$label"
      envs+=(GPUSLICE_COMPUTE_TRACE="$WORK/trace-$round-$label")
    fi
  fi
  echo "--- round $round: $label, $ranks ranks ${envs[*]}"
  run_limited "$(limit "${ROUND_LIMIT:-100}")" "nccl_bench $label" env "${envs[@]}" \
    python3 -m torch.distributed.run --standalone --nproc-per-node "$ranks" \
    "$HERE/nccl_bench.py" --label "$label" --out "$out" "$@" >"$WORK/nccl-$round-$label.log" 2>&1
  tail -5 "$WORK/nccl-$round-$label.log"
  [[ -f $out ]] && NCCL_RUNS+=("$out")
}

if [[ $BUILT == 1 ]]; then
  if wants tests; then
    phase "1. GPU tests: tests/gpu/test_multi_gpu.py"
    run_limited "$(limit 170)" "GPU tests" python3 -m pytest -m gpu tests/gpu/test_multi_gpu.py \
      --confcutdir=tests/gpu -p no:cacheprovider -v -rA --junitxml="$RESULTS/pytest-junit.xml"
  fi

  if wants inventory; then
    phase "2. inventory and the agent's Allocate"
    if [[ $DRY == 1 ]]; then INV=(--backend "fake:$HERE/fake_gpus.yaml"); else INV=(--holder); fi
    INV+=(--gpus "$NPROC")
    run_limited "$(limit 90)" "inventory.py" python3 "$HERE/inventory.py" "${INV[@]}" \
      --out "$RESULTS/inventory.json"
  fi

  round=0
  if wants nccl; then
    phase "3. NCCL: all-reduce and DDP, $NPROC ranks, compute limits ${SM_LIMITS[*]}"
    if [[ $DRY == 1 ]]; then
      run_limited 60 "nccl_bench.py --help" python3 "$HERE/nccl_bench.py" --help
    else
      for r in ${NCCL_ROUNDS:-plain caps compute plain caps}; do
        labels=("$r")
        [[ $r == compute ]] && labels=("${SM_LIMITS[@]/#/caps+compute-}")
        for label in "${labels[@]}"; do
          round=$((round + 1))
          nccl_round "$round" "$label" "$NPROC"
        done
      done
    fi
  fi

  if wants same-gpu && [[ $DRY == 0 ]]; then
    phase "4. two ranks on ONE GPU (gloo: NCCL refuses it): DDP, limits ${SM_LIMITS[*]}"
    for label in same-gpu-plain "${SM_LIMITS[@]/#/same-gpu-compute-}"; do
      round=$((round + 1))
      nccl_round "$round" "$label" 2 --backend gloo --same-gpu --sizes 1,16,64 --reps 3 \
        --ddp-width 1024 --ddp-batch 4096
    done
  fi

  if wants collective; then
    phase "5. kernels that spin on a peer through CUDA IPC (collective_caps.py)"
    if [[ $DRY == 1 ]]; then
      run_limited 60 "collective_caps.py --help" python3 "$HERE/collective_caps.py" --help
    else
      BEFORE=()
      [[ -n ${BEFORE_LIB:-} ]] && BEFORE=(--before-lib "$BEFORE_LIB" --before-timeout 15)
      [[ ${COMPUTE_PHASE:-1} == 0 ]] && BEFORE+=(--no-phase)
      [[ ${TRACE:-0} == 1 ]] && BEFORE+=(--trace "$WORK/trace-coll")
      run_limited "$(limit 200)" "collective_caps.py" python3 "$HERE/collective_caps.py" \
        --out "$WORK" --limits "$(IFS=,; echo "${SM_LIMITS[*]}")" "${BEFORE[@]}"
    fi
  fi
fi

phase "6. summary"
tar czf "$RESULTS/artifacts.tgz" -C "$WORK" --exclude site --exclude 'trace-*' . 2>/dev/null
if [[ ${TRACE:-0} == 1 ]]; then
  for d in "$WORK"/trace-*/ "$WORK"/trace-coll/*/; do
    [[ -d $d ]] && ls "$d"compute-trace.*.tsv >/dev/null 2>&1 || continue
    timeout 120 python3 "$HERE/trace_summary.py" "$d"; echo
  done >"$RESULTS/traces.md" 2>&1
  (cd "$WORK" && tar cf - trace-* | xz -T0 -6 >"$RESULTS/traces.txz")
  ls -l "$RESULTS/traces.txz"
fi
COLL=()
[[ -f $WORK/collective_caps.json ]] && COLL=(--collective "$WORK/collective_caps.json")
python3 "$HERE/summarize.py" "$RESULTS" "${COLL[@]}" "${NCCL_RUNS[@]}" | tee "$RESULTS/summary.md"
echo "run status: $STATUS (${SECONDS}s)"
exit $STATUS
