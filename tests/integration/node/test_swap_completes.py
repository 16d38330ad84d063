"""The swap of two interchangeable pods' assignments completes itself: a write of it that fails
(409, 500) or an agent killed between its two writes never leaves a GPU double-booked."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from lightkube.resources.core_v1 import Pod

from gpuslice import codec, handoff
from gpuslice.kube.client import dict_view
from gpuslice.node import swap as swap_mod
from gpuslice.node import verify
from gpuslice.node.agent import Agent
from gpuslice.node.nvml import FakeBackend
from kubelet.nodeharness import create, wait_for
from kubelet.pods import container, gpu, pod


class Killed(BaseException):
    """The agent dies here (not an Exception: nothing in the agent catches it)."""


async def _gpus(node, name):
    p = await node.client.get(dict_view(Pod), name, namespace="default")
    a = codec.decode_assignment(p["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION])
    return {s.uuid for c in a.containers for s in c.slices}


async def _assert_settled(node):
    one, two = await _gpus(node, "one"), await _gpus(node, "two")
    assert not one & two, f"a GPU double-booked: one {one}, two {two}"
    assert (one, two) == ({gpu(1)}, {gpu(0)}), "each names the GPU the kubelet gave it"


async def _swapped_pair(node, monkeypatch):
    """Pods one and two admitted in the other order, the check held back until their allocated
    marks are in the API; returns (release, names in the order the swap writes them)."""
    gate = asyncio.Event()
    real = verify.list_pod_resources

    async def gated(*args, **kwargs):
        if not gate.is_set():
            raise RuntimeError("held back by the test")
        return await real(*args, **kwargs)

    monkeypatch.setattr(verify, "list_pod_resources", gated)
    now = time.time()
    one = await create(node.client, pod("one", [container("main")], {"main": [gpu(0)]},
                                        at=now - 2))
    two = await create(node.client, pod("two", [container("main")], {"main": [gpu(1)]},
                                        at=now - 1))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    await node.kubelet.admit(two)
    await node.kubelet.admit(one)

    async def marked():
        for n in ("one", "two"):
            p = await node.client.get(dict_view(Pod), n, namespace="default")
            if p["metadata"]["annotations"].get(handoff.ALLOCATED) != "main":
                return False
        return True

    await wait_for(marked, "allocated marks written")
    order = [p["metadata"]["name"] for p in sorted((one, two), key=lambda p: p["metadata"]["uid"])]
    return gate, order


@pytest.mark.parametrize("code", [409, 500])
@pytest.mark.parametrize("nth", [0, 1])
async def test_a_failed_write_of_the_swap_is_completed(node, kube_api, monkeypatch, code, nth):
    faults = kube_api.need_faults()
    gate, order = await _swapped_pair(node, monkeypatch)
    faults.fail_next(1, code=code, method="PATCH", resource="pods", name=order[nth])
    gate.set()
    await wait_for(lambda: node.agent.metrics.swaps._value.get() == 1, "the swap completed")
    await _assert_settled(node)
    assert not node.agent.swapper.entries and node.agent.metrics.mismatches._value.get() == 0
    assert node.agent.metrics.swaps._value.get() == 1


async def test_every_write_failing_for_a_while_still_ends_settled(node, kube_api, monkeypatch):
    faults = kube_api.need_faults()
    gate, _ = await _swapped_pair(node, monkeypatch)
    faults.fail_next(6, code=500, method="PATCH", resource="pods")
    gate.set()
    await wait_for(lambda: node.agent.metrics.swaps._value.get() == 1, "the swap completed",
                   timeout=20)
    await _assert_settled(node)


async def test_an_agent_killed_between_the_two_writes_finishes_the_swap_at_start(
        node, monkeypatch):
    gate, order = await _swapped_pair(node, monkeypatch)
    regions_root = node.state / "regions"
    uids = {}
    for n in ("one", "two"):
        uids[n] = (await node.client.get(dict_view(Pod), n, namespace="default"))[
            "metadata"]["uid"]
    ino = {n: os.lstat(regions_root / uids[n]).st_ino for n in uids}
    real = swap_mod.update_metadata
    calls = []

    async def dies_on_second(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 2:
            raise Killed
        return await real(*args, **kwargs)

    monkeypatch.setattr(swap_mod, "update_metadata", dies_on_second)
    gate.set()
    await wait_for(lambda: len(calls) == 2, "the agent died between the writes")
    assert calls == order
    one, two = await _gpus(node, "one"), await _gpus(node, "two")
    assert one == two, "half done: both name the same GPU (what the issue saw)"
    assert (node.state / "swaps.json").read_text() != "[]", "the intent is journalled"

    monkeypatch.setattr(swap_mod, "update_metadata", real)
    base = node.state.parent
    again = Agent(node.agent.cfg, FakeBackend.with_count(2), node.client,
                  library=base / "libgpuslice.so")
    try:
        assert again.swapper.entries, "the restarted agent reads the journal back"
        await again.cluster.refresh()
        await again._verify_once()
        assert not again.swapper.entries and again.metrics.swaps._value.get() == 1
        await _assert_settled(node)
        assert os.lstat(regions_root / uids["one"]).st_ino == ino["two"]
        assert os.lstat(regions_root / uids["two"]).st_ino == ino["one"]
        await again._verify_once()  # nothing left to do, regions not exchanged back
        assert again.metrics.swaps._value.get() == 1
        assert os.lstat(regions_root / uids["one"]).st_ino == ino["two"]
        await _assert_settled(node)
    finally:
        await again.cluster.events.flush()
        again.backend.close()
