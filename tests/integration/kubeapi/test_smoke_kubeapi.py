from lightkube.resources.core_v1 import Pod


async def test_lightkube_lists_the_default_namespace(kube_api):
    client = kube_api.async_client()
    pods = [p async for p in client.list(Pod, namespace="default")]
    assert pods == []
