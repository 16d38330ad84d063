"""dra/fit.py: the dimension that runs out and the nearest node, from slices and claims as
the API returns them (the event's text is checked on the real control plane in
tests/integration/dra/test_dialects_through_dra.py)."""

from __future__ import annotations

from gpuslice import model
from gpuslice.dra import DRIVER, fit


def slice_of(node: str, *gpus: tuple[str, str, str, bool]) -> dict:
    return {"spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node}, "devices": [
        {"name": name, "allowMultipleAllocations": shared,
         "attributes": {"uuid": {"string": f"GPU-{node}-{name}"}, "model": {"string": kind}},
         "capacity": {"memory": {"value": memory, "requestPolicy": {"validRange": {
             "min": "256Mi", "step": "256Mi"}}}, "cores": {"value": "100"}}}
        for name, kind, memory, shared in gpus]}}


def claim(node: str, device: str, consumed: dict | None) -> dict:
    result = {"driver": DRIVER, "pool": node, "device": device, "request": "gpu"}
    if consumed is not None:
        result["consumedCapacity"] = consumed
    return {"status": {"allocation": {"devices": {"results": [result]}}}}


SLICES = [slice_of("a", ("gpu-0", "NVIDIA H100 80GB HBM3", "80Gi", True),
                   ("gpu-1", "NVIDIA H100 80GB HBM3", "80Gi", True)),
          slice_of("b", ("gpu-0", "NVIDIA A100-SXM4-40GB", "40Gi", True))]


def ask(memory_mib=None, cores=0, count=1, percent=None, **filters) -> model.PodRequest:
    s = model.SliceRequest(container="c", count=count, memory_mib=memory_mib,
                           memory_percent=percent if memory_mib is None else None, cores=cores)
    return model.PodRequest(namespace="ns", name="p", slices=(s,),
                            filter=model.GPUFilter(**filters))


def test_memory_that_runs_out_names_the_nearest_node_and_its_numbers():
    use = fit.used([claim("a", "gpu-0", {"memory": "50000Mi"}),
                    claim("a", "gpu-1", {"memory": "50000Mi", "cores": "20"})])
    text = fit.explain(ask(70000, cores=10), fit.devices(SLICES), use)
    assert text == ('container "c" (1 GPU, 70000 MiB, 10 cores each) fits no node: not enough '
                    "GPU memory (nearest: a: gpu-0 has 31920 MiB / 100 cores free of 81920 MiB "
                    "/ 100)")


def test_cores_that_run_out_are_named_as_cores():
    use = fit.used([claim("a", "gpu-0", {"memory": "1Gi", "cores": "90"}),
                    claim("a", "gpu-1", {"memory": "1Gi", "cores": "90"}),
                    claim("b", "gpu-0", {"memory": "1Gi", "cores": "95"})])
    text = fit.explain(ask(1024, cores=50), fit.devices(SLICES), use)
    assert "not enough GPU cores (nearest: a: gpu-0 has 80896 MiB / 10 cores free" in text


def test_a_whole_gpu_held_and_too_few_gpus_through_the_filters():
    use = fit.used([claim("b", "gpu-0", None)])  # allocated without consumedCapacity
    text = fit.explain(ask(1024, use_types=("a100",)), fit.devices(SLICES), use)
    assert "GPUs held whole by other claims (nearest: b: gpu-0 is held whole" in text
    text = fit.explain(ask(1024, count=2, use_types=("a100",)), fit.devices(SLICES), {})
    assert "too few GPUs pass its type/UUID filters (nearest: b, 1 of 1 GPUs pass, it needs 2)" \
        in text


def test_a_percent_is_of_each_gpu_and_rounded_up_to_the_step():
    use = fit.used([claim("b", "gpu-0", {"memory": "20224Mi"})])  # 20736 MiB left
    assert "fit on b" in fit.explain(ask(percent=50, use_types=("a100",)),
                                     fit.devices(SLICES), use), "50% of 40960 = 20480"
    use = fit.used([claim("b", "gpu-0", {"memory": "20736Mi"})])  # 20224 left
    assert "not enough GPU memory" in fit.explain(ask(percent=50, use_types=("a100",)),
                                                fit.devices(SLICES), use)


def test_when_the_gpus_fit_it_says_so_and_points_at_kube_schedulers_event():
    text = fit.explain(ask(1024), fit.devices(SLICES), {})
    assert text.startswith("the GPU claims fit on a, b by the published capacity: see "
                           "kube-scheduler's FailedScheduling event")


def test_no_slices_at_all():
    assert "no node publishes" in fit.explain(ask(1024), [], {})
