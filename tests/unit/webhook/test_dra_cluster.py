"""webhook/dra_cluster.py without a server: the inventory read from slices, a stored template
read as the spec written, and a claim made for another pod refused (also when the claim
cannot be read). The real kube-apiserver runs them in tests/integration/dra/."""

from __future__ import annotations

from typing import Any

import pytest

from gpuslice.dra import DRIVER
from gpuslice.kube import errors
from gpuslice.webhook.dra_cluster import canonical, foreign_claims, inventory_of


def device(memory: str, shared: bool = True) -> dict[str, Any]:
    return {"name": "gpu-0", "allowMultipleAllocations": shared,
            "capacity": {"memory": {"value": memory}}}


def test_the_inventory_has_the_distinct_sizes_and_whether_any_device_shares():
    slices = [{"spec": {"driver": DRIVER, "devices": [device("80Gi"), device("81920Mi")]}},
              {"spec": {"driver": DRIVER, "devices": [device("40Gi", shared=False)]}},
              {"spec": {"driver": "gpu.nvidia.com", "devices": [device("16Gi")]}}]
    inv = inventory_of(slices)
    assert (inv.slices, inv.sharing, inv.memory_mib) == (2, True, (40960, 81920))
    off = inventory_of([{"spec": {"driver": DRIVER, "devices": [device("80Gi", False)]}}])
    assert off.slices == 1 and not off.sharing


def test_a_stored_template_reads_as_the_spec_the_webhook_wrote():
    written = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "capacity": {"requests": {"memory": "4096Mi", "cores": "30"}}}}]}}}
    stored = {"metadata": {}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "capacity": {"requests": {"memory": "4Gi", "cores": "30"}}}}]}}}
    assert canonical(stored) == canonical(written)
    bigger = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "capacity": {"requests": {"memory": "4097Mi", "cores": "30"}}}}]}}}
    assert canonical(bigger) != canonical(written)


class Claims:
    """A client whose get answers from a dict of claims, or raises what it is given."""

    def __init__(self, claims: dict[str, Any]) -> None:
        self.claims = claims

    async def get(self, _res: Any, name: str, namespace: str) -> Any:
        got = self.claims.get(name)
        if isinstance(got, BaseException):
            raise got
        if got is None:
            raise errors.NotFound(f"resourceclaim {namespace}/{name}")
        return got


def naming(*claims: str) -> dict[str, Any]:
    return {"metadata": {"name": "thief"}, "spec": {"resourceClaims": [
        {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]}}


def owned_by(pod: str) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": [
        {"kind": "Pod", "name": pod, "controller": True, "apiVersion": "v1", "uid": "u"}]}}


async def test_a_claim_made_for_another_pod_is_refused_and_ones_own_pass():
    client = Claims({"stolen": owned_by("victim"), "shared": {"metadata": {}},
                     "mine": owned_by("thief")})
    problems = await foreign_claims(client, naming("stolen", "shared", "mine", "later"), "ns")
    assert problems == ["pod: spec.resourceClaims c0: resourceClaimName=stolen was made for pod "
                        "victim (from its template) and holds that pod's GPU share; name a "
                        "ResourceClaimTemplate or a ResourceClaim of your own"]


async def test_a_claim_that_cannot_be_read_refuses_the_pod():
    client = Claims({"x": errors.Forbidden("get resourceclaims is forbidden")})
    (problem,) = await foreign_claims(client, naming("x"), "ns")
    assert "cannot read resourceclaim x" in problem and "RBAC (get resourceclaims)" in problem


@pytest.mark.parametrize("pod", [{}, {"spec": None}, {"spec": {"resourceClaims": "x"}},
                                 {"spec": {"resourceClaims": [{"name": "a"}, 7]}}])
async def test_odd_shapes_are_no_claims(pod):
    assert await foreign_claims(Claims({}), pod, "ns") == []
