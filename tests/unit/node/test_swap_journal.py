"""swap.Swapper: the intent is journalled before any write, a swap an error or a kill left half
done is rolled forward by a later Swapper on the same journal, regions exchanged exactly once."""

from __future__ import annotations

import copy
import os

from gpuslice import codec, model
from gpuslice.kube import errors
from gpuslice.node.swap import Swapper

KEY = codec.ASSIGNMENT_ANNOTATION


class FakeClient:
    def __init__(self, *pods):
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.fail: list[tuple[str, Exception]] = []  # (name, error) for the next patches

    async def get(self, _res, name, namespace=None):
        if name not in self.pods:
            raise errors.NotFound(f"pod {name}", code=404)
        return copy.deepcopy(self.pods[name])

    async def patch(self, _res, name, body, namespace=None, patch_type=None):
        if self.fail and self.fail[0][0] == name:
            raise self.fail.pop(0)[1]
        p = self.pods[name]
        rv = body["metadata"].get("resourceVersion")
        if rv is not None and rv != p["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"pod {name}", code=409)
        p["metadata"]["annotations"].update(body["metadata"]["annotations"])
        p["metadata"]["resourceVersion"] = str(int(p["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(p)


def _pod(name, uid, value):
    return {"metadata": {"name": name, "namespace": "default", "uid": uid,
                         "resourceVersion": "1", "annotations": {KEY: value}}}


def _setup(tmp_path):
    a, b = _pod("a", "ua", "gpu0"), _pod("b", "ub", "gpu1")
    root = tmp_path / "regions"
    for uid in ("ua", "ub"):
        (root / uid).mkdir(parents=True)
    ino = {u: os.lstat(root / u).st_ino for u in ("ua", "ub")}
    return FakeClient(copy.deepcopy(a), copy.deepcopy(b)), a, b, root, ino


async def test_an_error_on_the_second_write_is_completed_next_round(tmp_path):
    client, a, b, root, ino = _setup(tmp_path)
    s = Swapper(client, root, tmp_path / "swaps.json")
    s.start(a, b)
    client.fail = [("b", errors.Unavailable("pod b", code=500))]
    assert await s.finish() == []
    assert client.pods["a"]["metadata"]["annotations"][KEY] == "gpu1" == \
        client.pods["b"]["metadata"]["annotations"][KEY], "half done after the error"
    assert s.pending() == {"ua", "ub"}
    assert os.lstat(root / "ua").st_ino == ino["ua"], "regions wait for both writes"
    assert len(await s.finish()) == 1
    assert client.pods["b"]["metadata"]["annotations"][KEY] == "gpu0"
    assert os.lstat(root / "ua").st_ino == ino["ub"] and os.lstat(root / "ub").st_ino == ino["ua"]
    assert not s.entries and Swapper(client, root, tmp_path / "swaps.json").entries == []


async def test_a_kill_after_the_first_write_is_rolled_forward_by_the_next_agent(tmp_path):
    client, a, b, root, ino = _setup(tmp_path)
    Swapper(client, root, tmp_path / "swaps.json").start(a, b)
    client.pods["a"]["metadata"]["annotations"][KEY] = "gpu1"  # the first write landed, then
    client.pods["a"]["metadata"]["resourceVersion"] = "7"      # a status write; then the kill
    s = Swapper(client, root, tmp_path / "swaps.json")
    assert len(await s.finish()) == 1
    assert [client.pods[n]["metadata"]["annotations"][KEY] for n in "ab"] == ["gpu1", "gpu0"]
    assert os.lstat(root / "ua").st_ino == ino["ub"]


async def test_a_kill_after_the_regions_were_exchanged_does_not_exchange_them_back(tmp_path):
    client, a, b, root, ino = _setup(tmp_path)
    s = Swapper(client, root, tmp_path / "swaps.json")
    s.start(a, b)
    entry = s.entries[0]
    await s._complete(entry)  # both writes and the regions, then killed before the journal
    again = Swapper(client, root, tmp_path / "swaps.json")
    assert len(await again.finish()) == 1
    assert os.lstat(root / "ua").st_ino == ino["ub"] and os.lstat(root / "ub").st_ino == ino["ua"]


async def test_a_conflict_is_retried_with_a_fresh_read_and_a_deleted_pod_is_done(tmp_path):
    client, a, b, root, _ = _setup(tmp_path)
    s = Swapper(client, root, tmp_path / "swaps.json")
    s.start(a, b)
    client.fail = [("a", errors.Conflict("pod a", code=409))]
    del client.pods["b"]
    assert len(await s.finish()) == 1
    assert client.pods["a"]["metadata"]["annotations"][KEY] == "gpu1"


async def test_an_assignment_someone_else_rewrote_is_left_alone(tmp_path):
    client, a, b, root, ino = _setup(tmp_path)
    s = Swapper(client, root, tmp_path / "swaps.json")
    s.start(a, b)
    client.pods["b"]["metadata"]["annotations"][KEY] = "gpu7"
    assert await s.finish() == [] and not s.entries
    assert client.pods["b"]["metadata"]["annotations"][KEY] == "gpu7"
    assert os.lstat(root / "ua").st_ino == ino["ua"]


async def test_a_half_done_swap_counts_each_pod_at_its_target_never_one_gpu_twice(tmp_path):
    one = codec.encode_assignment(model.PodAssignment(node="n", containers=(
        model.ContainerAssignment(container="main", slices=(
            model.GPUSlice(uuid="GPU-1", memory_mib=1024, cores=10),)),)))
    two = one.replace("GPU-1", "GPU-2")
    client = FakeClient(_pod("a", "ua", one), _pod("b", "ub", two))
    s = Swapper(client, tmp_path / "regions", tmp_path / "swaps.json")
    s.start(client.pods["a"], client.pods["b"])
    client.fail = [("b", errors.Unavailable("pod b", code=500))]
    await s.finish()  # a now names GPU-2, as b still does
    now = {u: codec.decode_assignment(client.pods[n]["metadata"]["annotations"][KEY])
           for u, n in (("ua", "a"), ("ub", "b"))}
    assert {a.containers[0].slices[0].uuid for a in now.values()} == {"GPU-2"}
    settled = s.settled({**now, "uc": now["ua"]})
    assert settled["ua"].containers[0].slices[0].uuid == "GPU-2"
    assert settled["ub"].containers[0].slices[0].uuid == "GPU-1"
    assert settled["uc"] is now["ua"], "pods outside the swap as they are"
    await s.finish()
    assert s.settled(now) == now, "nothing journalled: the annotations as they are"
