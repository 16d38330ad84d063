"""kube.patch against the test API server: the resourceVersion guard is real, and concurrent
read-modify-write updates lose nothing."""

from __future__ import annotations

import asyncio

import pytest
from informer_view import pod
from lightkube.resources.core_v1 import Pod

from gpuslice.kube import errors, patch
from gpuslice.kube.client import make_client

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def client(kube_api):
    async with make_client(str(kube_api.kubeconfig)) as api:
        yield api


async def test_a_guarded_patch_applies_to_its_version_only(client):
    created = await client.create(pod("web-0"))
    version = created.metadata.resourceVersion
    done = await patch.patch_metadata(client, Pod, "web-0", namespace="default",
                                      annotations={"gpuslice.io/assignment": "v1:x"},
                                      resource_version=version)
    assert done["metadata"]["annotations"] == {"gpuslice.io/assignment": "v1:x"}
    with pytest.raises(errors.Conflict, match=r"patch pod default/web-0: .*HTTP 409 Conflict"):
        await patch.patch_metadata(client, Pod, "web-0", namespace="default",
                                   annotations={"gpuslice.io/assignment": "v1:y"},
                                   resource_version=version)
    removed = await patch.patch_metadata(client, Pod, "web-0", namespace="default",
                                         annotations={"gpuslice.io/assignment": None})
    assert "gpuslice.io/assignment" not in (removed["metadata"].get("annotations") or {})


async def test_concurrent_appends_to_one_annotation_lose_no_update(client):
    await client.create(pod("web-1"))

    def append(name):
        def change(obj):
            current = (obj["metadata"].get("annotations") or {}).get("gpuslice.io/allocated")
            return {"annotations": {"gpuslice.io/allocated": f"{current},{name}" if current
                                    else name}}
        return change

    names = [f"c{i}" for i in range(8)]
    await asyncio.gather(*(patch.update_metadata(client, Pod, "web-1", append(n),
                                                 namespace="default", attempts=20)
                           for n in names))
    final = await client.get(Pod, "web-1", namespace="default")
    written = final.metadata.annotations["gpuslice.io/allocated"].split(",")
    assert sorted(written) == names, "every writer's append survived the races"


async def test_injected_conflicts_are_retried_until_the_write_lands(client, kube_api):
    faults = kube_api.need_faults()
    await client.create(pod("web-2"))
    faults.fail_next(3, code=409, method="PATCH", resource="pods")
    done = await patch.update_metadata(client, Pod, "web-2",
                                       lambda obj: {"labels": {"gpuslice.io/managed": "true"}},
                                       namespace="default")
    assert done["metadata"]["labels"] == {"gpuslice.io/managed": "true"}


async def test_a_missing_pod_is_not_found(client):
    with pytest.raises(errors.NotFound, match=r'pods "ghost" not found'):
        await patch.patch_metadata(client, Pod, "ghost", namespace="default",
                                   annotations={"a": "b"})
