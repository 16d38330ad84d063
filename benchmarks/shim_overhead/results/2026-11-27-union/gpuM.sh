# one GPU, final library: the GPU test of issue 21 (2000 steps), the compute-share GPU test, a traced pair at 30 and 50 %
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
PYTHONPATH=src:/tmp/site timeout 400 python3 -m pytest -m gpu tests/gpu/test_collectives_under_compute_caps.py tests/gpu/test_compute_share_on_a_gpu.py --confcutdir=tests/gpu -rA -p no:cacheprovider 2>&1 | tail -25
PYTHONPATH=src:/tmp/site timeout 150 python3 benchmarks/multi_gpu/collective_caps.py --lib native/build/libgpuslice.so --placements one-gpu --steps 2000 --disguised-seconds 0 --timeout 120 --limits 30,50 --trace /tmp/tr --out $OUT/traced 2>&1 | grep "one-gpu gpuslice"
for l in 30 50; do python3 benchmarks/multi_gpu/trace_summary.py /tmp/tr/one-gpu-$l > $OUT/traced-$l.md 2>&1; sed -n '/Held, by what/,/^## Held furthest/p' $OUT/traced-$l.md | head -12; done
python3 - /tmp/tr <<'PY' | tee $OUT/traced-batches.txt
import sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/one-gpu-*/compute-trace.*.tsv")):
    span = charge = busy = n = 0
    for line in open(f):
        x = line.rstrip("\n").split("\t")
        if x[0] == "B":
            n += 1; span += int(x[4]); charge += int(x[5]); busy += int(x[6])
    print("/".join(f.split("/")[-2:]), f"batches {n} span {span/1e9:.3f}s charged as measured or corrected {charge/1e9:.3f}s after the union {busy/1e9:.3f}s")
PY
