"""The node agent's pod store (node/cluster.py): a pod the watch adds while the list is on
its way is kept, so the Allocate proof (node/allocate.py) still sees it; the allocated mark is
written only where the kubelet has not shown the pod admitted in time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gpuslice.kube.cache import Change
from gpuslice.node.cluster import Cluster


def _pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}",
                         "resourceVersion": rv}, "spec": {"nodeName": "node-a"}}


class ListingClient:
    """lightkube's AsyncClient as far as Cluster.refresh uses it: `list` yields `items` and,
    half-way, lets the test deliver a watch event (the watch and the list run concurrently)."""

    def __init__(self, items: list[dict[str, Any]], meanwhile: Any) -> None:
        self.items, self.meanwhile = items, meanwhile

    async def list(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        for i, item in enumerate(self.items):
            if i == len(self.items) // 2:
                self.meanwhile()
            yield item


async def test_a_pod_the_watch_adds_during_a_list_is_kept_and_one_gone_is_dropped():
    old, gone, new = _pod("old", "5"), _pod("gone", "6"), _pod("new", "9")
    cluster = Cluster(None, "node-a")  # type: ignore[arg-type]
    for p in (old, gone):
        cluster._on_change(Change("ADDED", p["metadata"]["name"], None, p))
    cluster.client = ListingClient(  # type: ignore[assignment]
        [old, _pod("other", "7")],  # the list was read before `new` was bound (rv 9)
        lambda: cluster._on_change(Change("ADDED", "new", None, new)))
    assert await cluster.refresh()
    assert sorted(p["metadata"]["name"] for p in cluster.pods()) == ["new", "old", "other"]


# -- the allocated mark: written only where the kubelet's status has not come first ----------

def _admitted(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod after the kubelet's first status write (it follows every Allocate of the pod)."""
    rv = str(int(pod["metadata"]["resourceVersion"]) + 1)
    return {**pod, "metadata": {**pod["metadata"], "resourceVersion": rv},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "main"}]}}


class Marks:
    """update_metadata as Cluster._flush calls it: records each mark and answers with the pod
    as the API server would have it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.written = cluster, []

    async def __call__(self, client: Any, kind: Any, name: str, change: Any, *,
                       namespace: str) -> dict[str, Any]:
        pod = next(p for p in self.cluster._pods.values() if p["metadata"]["name"] == name)
        patch = change(pod)
        self.written.append((name, patch))
        meta = pod["metadata"]
        return {**pod, "metadata": {**meta, "resourceVersion": str(int(meta["resourceVersion"])
                                                                    + 1),
                                    "annotations": {**(meta.get("annotations") or {}),
                                                    **patch["annotations"]}}}


def _answered_cluster(monkeypatch: Any, tmp_path: Any, mark_after_s: float
                      ) -> tuple[Cluster, Marks, dict[str, Any]]:
    cluster = Cluster(None, "node-a", mark_after_s=mark_after_s,  # type: ignore[arg-type]
                      journal=tmp_path / "answered.json")
    marks = Marks(cluster)
    monkeypatch.setattr("gpuslice.node.cluster.update_metadata", marks)
    pod = _pod("p", "5")
    cluster._on_change(Change("ADDED", "p", None, pod))
    cluster.answered("default", "p", "uid-p", "main")
    return cluster, marks, pod


def _shown(cluster: Cluster) -> str | None:
    return (cluster.pods()[0]["metadata"].get("annotations") or {}).get("gpuslice.io/allocated")


async def test_no_mark_is_written_for_a_pod_the_kubelet_shows_admitted_in_time(
        monkeypatch, tmp_path):
    cluster, marks, pod = _answered_cluster(monkeypatch, tmp_path, mark_after_s=60)
    assert cluster.queued == 0, "not due yet"
    await cluster._flush()
    cluster._on_change(Change("MODIFIED", "p", pod, _admitted(pod)))
    monkeypatch.setattr("time.time", lambda: 1e12)  # long past the mark's time
    await cluster._flush()
    assert marks.written == [] and cluster.queued == 0
    assert _shown(cluster) == "main", "the agent still counts the container answered"
    assert "uid-p" in (tmp_path / "answered.json").read_text(), "and keeps it across a restart"
    cluster._on_change(Change("DELETED", "p", _admitted(pod), None))
    assert cluster._answered == {} and "uid-p" not in (tmp_path / "answered.json").read_text()


async def test_the_mark_is_written_once_due_where_the_kubelet_has_not_shown_the_pod_admitted(
        monkeypatch, tmp_path):
    cluster, marks, _ = _answered_cluster(monkeypatch, tmp_path, mark_after_s=60)
    await cluster._flush()
    assert marks.written == []
    monkeypatch.setattr("time.time", lambda: 1e12)
    assert cluster.queued == 1
    await cluster._flush()
    assert marks.written == [("p", {"annotations": {"gpuslice.io/allocated": "main"}})]
    assert cluster._answered == {}, "the API shows the mark: the record is done"
    assert _shown(cluster) == "main"


async def test_a_journal_written_before_mark_times_marks_at_once(monkeypatch, tmp_path):
    (tmp_path / "answered.json").write_text('{"uid-p": ["default", "p", ["main"]]}')
    cluster = Cluster(None, "node-a", journal=tmp_path / "answered.json")  # type: ignore[arg-type]
    marks = Marks(cluster)
    monkeypatch.setattr("gpuslice.node.cluster.update_metadata", marks)
    cluster._on_change(Change("ADDED", "p", None, _pod("p", "5")))
    assert cluster.queued == 1
    await cluster._flush()
    assert [name for name, _ in marks.written] == ["p"]


async def test_an_answer_for_a_pod_deleted_while_the_agent_was_down_is_dropped(tmp_path):
    (tmp_path / "answered.json").write_text('{"uid-gone": ["default", "gone", ["main"], 0]}')
    cluster = Cluster(None, "node-a", journal=tmp_path / "answered.json")  # type: ignore[arg-type]
    cluster.client = ListingClient([_pod("other", "7")], lambda: None)  # type: ignore[assignment]
    assert await cluster.refresh()
    assert cluster._answered == {} and cluster.queued == 0


def test_a_garbled_journal_is_set_aside_with_a_warning(tmp_path, caplog):
    for text in ('{"uid-p": []}', '{"uid-p": {"ns": "default"}}', "[1, 2", '{"uid-p": 7}'):
        (tmp_path / "answered.json").write_text(text)
        cluster = Cluster(None, "node-a",  # type: ignore[arg-type]
                          journal=tmp_path / "answered.json")
        assert cluster._answered == {}
    assert caplog.text.count("unreadable") == 4
