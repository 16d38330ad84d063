# one GPU: the one-GPU IPC pair over 2000 steps: base (HEAD before the union), new (union + queue on for a peer in a sync), uonly (union alone), alternated; a traced new run
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
make -C .before-prog/base/native ZIG= -B -j8 >/dev/null 2>&1 || { echo base build failed; exit 1; }
make -C .before-prog/uonly/native ZIG= -B -j8 >/dev/null 2>&1 || { echo uonly build failed; exit 1; }
NEW=native/build/libgpuslice.so; BASE=.before-prog/base/native/build/libgpuslice.so; UONLY=.before-prog/uonly/native/build/libgpuslice.so
cc() { PYTHONPATH=src:/tmp/site timeout 150 python3 benchmarks/multi_gpu/collective_caps.py --placements one-gpu --steps 2000 --disguised-seconds 0 --timeout 120 "$@" 2>&1 | grep "one-gpu gpuslice"; }
for i in 1 2; do
  cc --lib $NEW --limits 30,50 --out $OUT/new-$i | sed "s/^/[new $i] /"
  cc --lib $BASE --limits 30,50 --out $OUT/base-$i | sed "s/^/[base $i] /"
done
cc --lib $UONLY --limits 30,50 --out $OUT/uonly-1 | sed "s/^/[uonly 1] /"
cc --lib $NEW --limits 50 --trace /tmp/tr --out $OUT/new-traced | sed "s/^/[new traced] /"
python3 benchmarks/multi_gpu/trace_summary.py /tmp/tr/one-gpu-50 > $OUT/new-traced-50.md 2>&1; sed -n '/Held, by what/,/^## Held furthest/p' $OUT/new-traced-50.md | head -16
python3 - /tmp/tr/one-gpu-50 <<'PY' | tee $OUT/new-traced-batches.txt
# B lines: how much of the measured spans the union took out (busy < charge)
import sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/compute-trace.*.tsv")):
    span = charge = busy = n = 0
    for line in open(f):
        x = line.rstrip("\n").split("\t")
        if x[0] == "B":
            n += 1
            try: span += int(x[4]); charge += int(x[5]); busy += int(x[6])
            except (IndexError, ValueError): pass
    print(f.split("/")[-1], f"batches {n} span {span/1e9:.3f}s charge {charge/1e9:.3f}s busy {busy/1e9:.3f}s")
PY
