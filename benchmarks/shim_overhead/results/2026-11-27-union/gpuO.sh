# one GPU: the final build against the GPU tests that touch the compute path, the node agent and the library's start-up
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
make -C native ZIG= -B -j8 >/dev/null 2>&1 || { echo build failed; exit 1; }
PYTHONPATH=src:/tmp/site timeout 520 python3 -m pytest -m gpu tests/gpu/test_compute_and_fork_on_a_gpu.py tests/gpu/test_agent_region_on_gpu.py tests/gpu/test_node_agent_on_gpu.py tests/gpu/test_hot_paths_pass_through_without_limits.py tests/gpu/test_gpuslice_run_cli_on_a_gpu.py tests/gpu/test_pytorch_work_runs_correctly_under_limits.py --confcutdir=tests/gpu -rA -p no:cacheprovider -q 2>&1 | grep -E "^(PASSED|FAILED|XPASS|XFAIL|ERROR|SKIPPED)|passed|failed|error" | tail -40
