"""HAMi's priority on the DRA path: the claim's opaque config (the webhook writes it) reaches
the region the library reads; anything else in our driver's config is refused, named."""

from __future__ import annotations

import pytest

from gpuslice.container.limits import region_spec
from gpuslice.dra import DRIVER, claims
from gpuslice.dra.claims import DraError

UUID = "GPU-8c1d4d8e-0000-4000-8000-000000000001"
DEVICES = {"gpu-0": claims.NodeDevice("gpu-0", UUID, 0, 81920, True)}


def allocated(*config: dict) -> dict:
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}, "status": {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n",
                                 "device": "gpu-0", "shareID": "s",
                                 "consumedCapacity": {"memory": "4Gi", "cores": "30"}}],
                    "config": list(config)}}}}


def share_config(**params) -> dict:
    return {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {
        "apiVersion": "gpu.gpuslice.io/v1alpha1", "kind": "ShareConfig", **params}}}


def test_low_priority_reaches_the_region_and_high_is_the_default():
    low = claims.shares(allocated(share_config(priority=1)), driver=DRIVER, node="n",
                        devices=DEVICES)
    assert region_spec(low).priority == 1
    plain = claims.shares(allocated(), driver=DRIVER, node="n", devices=DEVICES)
    assert plain.priority == 0 and region_spec(plain).priority == 0


def test_another_drivers_config_is_not_ours_to_read():
    other = {"source": "FromClass", "opaque": {"driver": "gpu.nvidia.com", "parameters": {
        "whatever": True}}}
    got = claims.shares(allocated(other), driver=DRIVER, node="n", devices=DEVICES)
    assert got.priority == 0


@pytest.mark.parametrize(("why", "config", "said"), [
    ("a priority that is none", share_config(priority=5), "priority=5: use 0 (high) or 1"),
    ("a boolean is not a priority", share_config(priority=True), "priority=True"),
    ("a field we do not know", share_config(priority=1, memory="80Gi"),
     "not a gpu.gpuslice.io/v1alpha1 ShareConfig"),
    ("another kind", {"opaque": {"driver": DRIVER, "parameters": {
        "apiVersion": "gpu.gpuslice.io/v1alpha1", "kind": "Limits"}}}, "ShareConfig"),
])
def test_a_config_we_cannot_honour_fails_the_prepare_with_what_to_fix(why, config, said):
    with pytest.raises(DraError) as err:
        claims.shares(allocated(config), driver=DRIVER, node="n", devices=DEVICES)
    assert said in str(err.value) and "claim ns/c" in str(err.value), why
