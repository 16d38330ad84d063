# two GPUs: ranks in two pods of one job with one gang directory (the gang file's slots now locked while their owners live)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
PYTHONPATH=src:/tmp/site timeout 280 python3 benchmarks/multi_gpu/collective_caps.py --lib native/build/libgpuslice.so --placements two-gpus,one-gpu --limits 30,50 --disguised-seconds 0 --pods gang --steps 2000 --timeout 100 --out $OUT/pods-gang 2>&1 | grep -E "gpu|skip" | sed "s/^/[gang] /"
PYTHONPATH=src:/tmp/site timeout 200 python3 -m pytest -m gpu tests/gpu/test_collectives_under_compute_caps.py --confcutdir=tests/gpu -rA -p no:cacheprovider 2>&1 | grep -E "^(PASSED|FAILED|ERROR)|passed|failed"
