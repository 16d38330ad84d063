"""kube/patch.py: metadata merge patches, the resourceVersion guard and retry on conflict."""

from __future__ import annotations

import httpx2
import pytest
from kube_helpers import body, mock_client, status
from lightkube.resources.core_v1 import Node, Pod

from gpuslice.kube import errors, patch


class OnePod:
    """One pod behind GET and merge PATCH, with kube-apiserver's resourceVersion check.
    `racers` other writers bump the version between our GET and our PATCH."""

    def __init__(self, racers: int = 0) -> None:
        self.obj = {"kind": "Pod", "apiVersion": "v1",
                    "metadata": {"name": "web-0", "namespace": "ml", "resourceVersion": "7",
                                 "annotations": {"keep": "me", "drop": "me"}}}
        self.racers = racers
        self.requests: list[tuple[str, str, object]] = []

    def bump(self) -> None:
        meta = self.obj["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append((request.method, request.url.path, body(request)))
        assert request.url.path == "/api/v1/namespaces/ml/pods/web-0"
        if request.method == "GET":
            if self.racers:
                self.racers -= 1
                reply = httpx2.Response(200, json=self.obj)
                self.bump()
                return reply
            return httpx2.Response(200, json=self.obj)
        assert request.method == "PATCH"
        assert request.headers["content-type"] == "application/merge-patch+json"
        meta_patch = body(request)["metadata"]
        meta = self.obj["metadata"]
        wanted = meta_patch.pop("resourceVersion", None)
        if wanted is not None and wanted != meta["resourceVersion"]:
            return status(409, "Conflict", 'Operation cannot be fulfilled on pods "web-0": '
                          "the object has been modified; please apply your changes to the "
                          "latest version and try again")
        for field, values in meta_patch.items():
            target = meta.setdefault(field, {})
            for key, value in values.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
        self.bump()
        return httpx2.Response(200, json=self.obj)


async def test_patch_sets_and_removes_annotations_in_one_merge_patch():
    pod = OnePod()
    async with mock_client(pod) as client:
        out = await patch.patch_metadata(client, Pod, "web-0", namespace="ml",
                                         annotations={"gpuslice.io/x": "1", "drop": None},
                                         labels={"gpuslice.io/managed": "true"})
    assert out["metadata"]["annotations"] == {"keep": "me", "gpuslice.io/x": "1"}
    assert out["metadata"]["labels"] == {"gpuslice.io/managed": "true"}
    assert type(out) is dict, "callers get plain dicts, as the API sent them"
    assert pod.requests[0][2] == {"metadata": {
        "annotations": {"gpuslice.io/x": "1", "drop": None},
        "labels": {"gpuslice.io/managed": "true"}}}, "no resourceVersion unless asked"


async def test_a_patch_guarded_by_a_stale_resource_version_is_a_conflict():
    pod = OnePod()
    async with mock_client(pod) as client:
        with pytest.raises(errors.Conflict, match=r"^patch pod ml/web-0: Operation cannot"):
            await patch.patch_metadata(client, Pod, "web-0", namespace="ml",
                                       annotations={"a": "b"}, resource_version="6")
    assert "a" not in pod.obj["metadata"]["annotations"], "a refused patch changes nothing"


async def test_a_cluster_scoped_node_is_patched_at_its_own_path():
    seen = []

    def handler(request):
        seen.append(request.url.path)
        return httpx2.Response(200, json={"metadata": {"name": "gpu-1"}})

    async with mock_client(handler) as client:
        await patch.patch_metadata(client, Node, "gpu-1", annotations={"k": "v"})
    assert seen == ["/api/v1/nodes/gpu-1"]


async def test_non_string_values_are_refused_before_reaching_the_server():
    async with mock_client(lambda r: pytest.fail("no request expected")) as client:
        with pytest.raises(TypeError, match=r"annotations count: values must be strings"):
            await patch.patch_metadata(client, Pod, "p", namespace="ml", annotations={"count": 3})


async def test_update_metadata_rereads_and_reapplies_after_conflicts():
    pod = OnePod(racers=2)  # two other writers get in between our first two read/patch pairs

    def append_allocated(obj):
        current = obj["metadata"]["annotations"].get("gpuslice.io/allocated")
        return {"annotations": {"gpuslice.io/allocated": f"{current},b" if current else "b"}}

    async with mock_client(pod) as client:
        out = await patch.update_metadata(client, Pod, "web-0", append_allocated, namespace="ml")
    assert out["metadata"]["annotations"]["gpuslice.io/allocated"] == "b"
    methods = [m for m, _, _ in pod.requests]
    assert methods == ["GET", "PATCH", "GET", "PATCH", "GET", "PATCH"], methods
    guarded = [b["metadata"]["resourceVersion"] for m, _, b in pod.requests if m == "PATCH"]
    assert guarded == ["7", "8", "9"], "each patch carries the version it was computed from"


async def test_update_metadata_gives_up_with_the_conflict_after_its_attempts():
    pod = OnePod(racers=10)
    async with mock_client(pod) as client:
        with pytest.raises(errors.Conflict):
            await patch.update_metadata(client, Pod, "web-0", lambda o: {"labels": {"a": "b"}},
                                        namespace="ml", attempts=3)
    assert [m for m, _, _ in pod.requests].count("PATCH") == 3


async def test_update_metadata_writes_nothing_when_there_is_nothing_to_change():
    pod = OnePod()
    async with mock_client(pod) as client:
        assert await patch.update_metadata(client, Pod, "web-0", lambda o: None,
                                           namespace="ml") is None
    assert [m for m, _, _ in pod.requests] == ["GET"]


async def test_update_metadata_on_a_deleted_object_is_not_found():
    async with mock_client(lambda r: status(404, "NotFound", 'pods "web-0" not found')) as client:
        with pytest.raises(errors.NotFound, match=r'^get pod ml/web-0: pods "web-0" not found'):
            await patch.update_metadata(client, Pod, "web-0", lambda o: None, namespace="ml")


async def test_retry_on_conflict_does_not_retry_other_errors():
    calls = 0

    async def fails():
        nonlocal calls
        calls += 1
        raise errors.Unavailable("down")

    with pytest.raises(errors.Unavailable):
        await patch.retry_on_conflict(fails)
    assert calls == 1


async def test_retry_on_conflict_backs_off_between_attempts(monkeypatch):
    sleeps: list[float] = []

    async def fake_sleep(delay):
        sleeps.append(delay)

    monkeypatch.setattr(patch.asyncio, "sleep", fake_sleep)

    async def conflict():
        raise errors.Conflict("raced", code=409)

    with pytest.raises(errors.Conflict):
        await patch.retry_on_conflict(conflict, attempts=4, backoff_s=0.1, max_backoff_s=0.25)
    assert len(sleeps) == 3
    for delay, base in zip(sleeps, (0.1, 0.2, 0.25), strict=True):
        assert 0.5 * base <= delay <= 1.5 * base, "doubling, capped, with +-50% jitter"
