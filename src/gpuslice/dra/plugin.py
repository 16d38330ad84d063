"""The kubelet DRA plugin (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`) as a grpc.aio servicer.
Owns: NodePrepareResources (the claim from the API server, its uid checked -> its shares here
(claims.py) and, under a compute limit, the `gpuslice.io/gang` of its pods (status.reservedFor,
each read from the API server, its uid checked) -> its region
`<state-dir>/dra/regions/<claim-uid>/region` (container/regions.place), the gang's directory
(regions.prepare_gang, under the layout's gangs root: the device plugin path's), CDI spec
(cdi.py), checkpoint entry; one Device per share), NodeUnprepareResources (CDI spec,
region directory and entry removed: paths follow from the uid, so a prepare killed half-way is
undone too), `status.devices[]` (best effort, in the background), the claim's pods (read again
at a repeated prepare and at the sweep), and the sweep of claims that no longer exist (asking
the API server only about claims none of whose pods run on the node).
Does not: serve sockets or register (kubelet.py), publish slices (publisher.py).
Invariants: a prepare repeated (also after a restart: from the checkpoint, without the API
server) gives the same answer, gang included, and keeps a region whose limits match (its
processes hold it). A gang becomes a path only as a DNS label (dialects.gang_of), below
directories opened without following symlinks.
Failure: per claim, in the response's `error` (the kubelet retries and shows it in the pod's
events): what is wrong and what to do (also: pods of the claim that name different gangs, or a
gang that is no DNS label); one claim's failure never fails the others.
Tests: tests/unit/dra/test_plugin_prepare.py, test_plugin_gang.py,
tests/integration/dra/test_plugin_with_kubelet.py
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

import grpc
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimStatus
from lightkube.types import PatchType

from gpuslice import dialects
from gpuslice.container import regions
from gpuslice.container.edits import REGION_FILE, Layout, gang_host_dir
from gpuslice.container.limits import FULL_CORES, ClaimShares, region_spec
from gpuslice.dra import cdi, claims
from gpuslice.dra.checkpoint import Checkpoint
from gpuslice.dra.claims import DraError, NodeDevice
from gpuslice.dra.proto import dra_pb2 as pb
from gpuslice.dra.proto import dra_pb2_grpc as pb_grpc
from gpuslice.kube import errors as kerrors
from gpuslice.kube.client import dict_view
from gpuslice.kube.patch import retry_on_conflict

__all__ = ["ApiClaims", "ClaimApi", "DraPlugin", "status_devices"]

log = logging.getLogger(__name__)


class ClaimApi(Protocol):
    """What the plugin asks the API server (ApiClaims; a dict-backed double in unit tests)."""

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]: ...

    async def pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...

    async def set_devices(self, namespace: str, name: str, uid: str,
                          change: Callable[[list[Any]], list[Any]]) -> None: ...


class ApiClaims:
    """ClaimApi over lightkube (RBAC: resourceclaims get; pods get, for their gang;
    resourceclaims/status patch and, from Kubernetes 1.36, resourceclaims/driver
    associated-node:patch for status.devices)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        with kerrors.translate(f"get resourceclaim {namespace}/{name}"):
            return dict(await self.client.get(dict_view(ResourceClaim), name,
                                              namespace=namespace))

    async def pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        with kerrors.translate(f"get pod {namespace}/{name}"):
            return dict(await self.client.get(dict_view(Pod), name, namespace=namespace))

    async def set_devices(self, namespace: str, name: str, uid: str,
                          change: Callable[[list[Any]], list[Any]]) -> None:
        """Read the claim, replace status.devices with change(devices), guarded by its
        resourceVersion (409 -> retried on a fresh read); nothing if the claim is another."""
        async def once() -> None:
            claim = await self.get(namespace, name)
            if claim["metadata"].get("uid") != uid:
                return
            old = list((claim.get("status") or {}).get("devices") or [])
            new = change(old)
            if new == old:
                return
            body = {"metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
                    "status": {"devices": new}}
            with kerrors.translate(f"patch resourceclaim {namespace}/{name} status"):
                await self.client.patch(ResourceClaimStatus, name, body, namespace=namespace,
                                        patch_type=PatchType.MERGE)

        await retry_on_conflict(once)


def status_devices(old: list[Any], c: ClaimShares, driver: str, node: str) -> list[Any]:
    """status.devices with this node's entries for the claim's shares (others kept as they are;
    an entry we wrote before keeps its condition's transition time)."""
    kept = [d for d in old if not (isinstance(d, Mapping) and d.get("driver") == driver and
                                   d.get("pool") == node)]
    before = {(d.get("device"), d.get("shareID", "")): d for d in old
              if isinstance(d, Mapping) and d not in kept}
    out = []
    for s in c.shares:
        entry: dict[str, Any] = {"driver": driver, "pool": node, "device": s.device}
        if s.share_id:
            entry["shareID"] = s.share_id
        entry["data"] = {"memoryMiB": s.memory_mib, "cores": s.cores, "uuid": s.uuid}
        prev = before.get((s.device, s.share_id or ""), {})
        since = next((x.get("lastTransitionTime") for x in prev.get("conditions") or []
                      if x.get("type") == "Ready"), None)
        entry["conditions"] = [{
            "type": "Ready", "status": "True", "reason": "Prepared",
            "message": f"gpuslice enforces {s.memory_mib} MiB and {s.cores}% of GPU {s.uuid}",
            "lastTransitionTime": since or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]
        out.append(entry)
    return kept + out


class DraPlugin(pb_grpc.DRAPluginServicer):
    def __init__(self, *, driver: str, node: str, api: ClaimApi,
                 devices: Callable[[], Mapping[str, NodeDevice]], state_dir: str | Path,
                 cdi_dir: str | Path, layout: Layout, grace_s: float = 300.0) -> None:
        self.driver = driver
        self.node = node
        self.api = api
        self.devices = devices
        self.root = Path(state_dir) / "dra" / "regions"
        self.root.mkdir(parents=True, exist_ok=True)
        self.cdi_dir = Path(cdi_dir)
        self.layout = layout
        self.grace_s = grace_s
        self.checkpoint = Checkpoint(Path(state_dir) / "dra" / "prepared.json")
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # claim uid -> (lock, users)
        self._reports: set[asyncio.Task[None]] = set()

    # ---- gRPC
    async def NodePrepareResources(self, request: pb.NodePrepareResourcesRequest,
                                   context: grpc.aio.ServicerContext
                                   ) -> pb.NodePrepareResourcesResponse:
        answers = await asyncio.gather(*(self._answer_prepare(c) for c in request.claims))
        return pb.NodePrepareResourcesResponse(
            claims={c.uid: a for c, a in zip(request.claims, answers, strict=True)})

    async def NodeUnprepareResources(self, request: pb.NodeUnprepareResourcesRequest,
                                     context: grpc.aio.ServicerContext
                                     ) -> pb.NodeUnprepareResourcesResponse:
        out = {}
        for c in request.claims:
            try:
                await self.unprepare(c.uid)
                out[c.uid] = pb.NodeUnprepareResourceResponse()
            except Exception as exc:
                log.exception("unprepare failed", extra={"claim": f"{c.namespace}/{c.name}"})
                out[c.uid] = pb.NodeUnprepareResourceResponse(
                    error=f"gpuslice: claim {c.namespace}/{c.name}: unprepare failed ({exc}); "
                          "the kubelet retries; see the gpuslice node agent's logs")
        return pb.NodeUnprepareResourcesResponse(claims=out)

    async def _answer_prepare(self, c: pb.Claim) -> pb.NodePrepareResourceResponse:
        key = f"claim {c.namespace}/{c.name}"
        try:
            shares = await self.prepare(c.namespace, c.name, c.uid)
        except DraError as exc:
            log.warning("prepare refused: %s", exc, extra={"claim": key})
            return pb.NodePrepareResourceResponse(error=f"gpuslice: {exc}")
        except kerrors.APIError as exc:
            log.warning("prepare: reading the claim failed: %s", exc, extra={"claim": key})
            return pb.NodePrepareResourceResponse(
                error=f"gpuslice: {key}: cannot read it from the API server ({exc}); the "
                      "kubelet retries; check the node agent's API access (RBAC: resourceclaims "
                      "get)")
        except Exception as exc:
            log.exception("prepare failed", extra={"claim": key})
            return pb.NodePrepareResourceResponse(
                error=f"gpuslice: {key}: internal error ({exc}); see the gpuslice node agent's "
                      "logs on this node")
        return pb.NodePrepareResourceResponse(devices=self.answer(shares))

    # ---- the work
    def answer(self, c: ClaimShares) -> list[pb.Device]:
        # every device names the claim's CDI device (a container may use one request of the
        # claim only); the kubelet passes a repeated id on, and CDI applies it idempotently
        # (mounts and device nodes replaced by path, env by name)
        ids = [cdi.device_id(c.uid)]
        out = []
        for s in c.shares:
            extra = [f"nvidia.com/gpu={s.uuid}"] if self.layout.cdi else []
            d = pb.Device(request_names=[s.request], pool_name=self.node, device_name=s.device,
                          cdi_device_ids=ids + extra)
            if s.share_id:
                d.share_id = s.share_id
            out.append(d)
        return out

    @contextlib.asynccontextmanager
    async def _claim(self, uid: str) -> AsyncIterator[None]:
        """One prepare, unprepare or sweep of a claim at a time (the lock goes with its last
        user, so the table does not grow with every claim the node ever saw)."""
        lock, users = self._locks.get(uid, (asyncio.Lock(), 0))
        self._locks[uid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            users = self._locks[uid][1] - 1
            if users:
                self._locks[uid] = (lock, users)
            else:
                del self._locks[uid]

    async def prepare(self, namespace: str, name: str, uid: str) -> ClaimShares:
        """Prepare one claim (idempotent); DraError/APIError when it cannot be."""
        try:
            cdi.check_uid(uid)
        except ValueError as exc:
            raise DraError(f"claim {namespace}/{name}: {exc}") from None
        async with self._claim(uid):
            entry = self.checkpoint.get(uid)
            if entry is not None:
                c = entry.claim
            else:
                claim = await self.api.get(namespace, name)
                got = (claim.get("metadata") or {}).get("uid")
                if got != uid:
                    raise DraError(f"claim {namespace}/{name}: the API server has uid {got}, the "
                                   f"kubelet asked for {uid}: the claim was deleted and created "
                                   "again; delete the pod so that it uses the new claim")
                c = claims.shares(claim, driver=self.driver, node=self.node,
                                  devices=self.devices())
                # recorded with the claim: its pods may be gone or unreadable at the next prepare
                c = dataclasses.replace(c, gang=await self._gang(c))
            self._materialise(c)
            self.checkpoint.put(c)
        log.info("claim prepared", extra={"claim": c.key, "claim_uid": uid, "gang": c.gang,
                                          "shares": [f"{s.device}:{s.memory_mib}MiB/{s.cores}%"
                                                     for s in c.shares]})
        # prepared before: the kubelet asks again for another pod of the claim (or after a
        # restart), so its pods may have changed; its shares cannot (the allocation is fixed)
        self._report_later(c, refresh_pods=entry is not None)
        return c

    async def _gang(self, c: ClaimShares) -> str:
        """The `gpuslice.io/gang` the claim's pods name ("" none), read only where its containers
        get gang holds (a compute limit) and the layout has a gangs root. A pod that is gone, or
        whose name another pod holds now (its uid), uses the claim no more. DraError when a pod
        names no DNS label, or the pods name different gangs (they share one CDI spec)."""
        if not self.layout.gangs_host or not 0 < region_spec(c).sm_limit < FULL_CORES:
            return ""
        read = await asyncio.gather(*(self._pod(c, name, uid) for name, uid in c.pods))
        named: dict[str, str] = {}  # pod name -> its gang ("" none)
        for (name, _), pod in zip(c.pods, read, strict=True):
            if pod is None:
                continue
            if problems := dialects.gang_problems(pod):  # never a path, nor read as none
                raise DraError(f"claim {c.key}: pod {name}: {problems[0].removeprefix('pod: ')}"
                               ", then create the pod again")
            named[name] = dialects.gang_of(pod)
        if len(set(named.values())) > 1:
            said = ", ".join(f"{n}: {g or 'none'}" for n, g in named.items())
            raise DraError(f"claim {c.key}: its pods name different {dialects.GANG_ANNOTATION} "
                           f"({said}); pods sharing a ResourceClaim must name the same "
                           f"{dialects.GANG_ANNOTATION} (or none), since they share its CDI spec "
                           "and so one gang directory: give them the same value, or each pod a "
                           "claim of its own")
        return next(iter(named.values()), "")

    async def _pod(self, c: ClaimShares, name: str, uid: str) -> Mapping[str, Any] | None:
        """Pod `name` of the claim's namespace if it is still the one reserved (uid); None if it
        is gone or another pod has its name now."""
        try:
            pod = await self.api.pod(c.namespace, name)
        except kerrors.NotFound:
            return None
        except kerrors.APIError as exc:
            raise DraError(f"claim {c.key}: cannot read its pod {c.namespace}/{name} from the API "
                           f"server for its {dialects.GANG_ANNOTATION} ({exc}); the kubelet "
                           "retries; check the node agent's API access (RBAC: pods get)") from None
        return pod if (pod.get("metadata") or {}).get("uid") == uid else None

    def _materialise(self, c: ClaimShares) -> None:
        spec = region_spec(c, compute_mode=self.layout.compute_mode)
        gang_dir = gang_host_dir(self.layout, c.namespace, c.gang)
        if gang_dir:  # the directory the spec mounts: there before a container starts
            try:
                regions.prepare_gang(self.layout.gangs_host, c.namespace, c.gang)
            except (OSError, ValueError) as exc:
                raise DraError(f"claim {c.key}: the directory of {dialects.GANG_ANNOTATION} "
                               f"{c.gang}: {exc}") from None
        d = regions.prepare(self.root, c.uid)
        how = regions.place(d / REGION_FILE, spec)
        if how == "replaced":
            log.warning("the claim's region did not hold its limits; replaced",
                        extra={"claim": c.key})
        cdi.write(self.cdi_dir, c.uid, cdi.build(c.uid, spec, [s.minor for s in c.shares],
                                                 str(d), self.layout, gang_dir=gang_dir))

    async def unprepare(self, uid: str) -> None:
        """Remove what prepare made for `uid`; a claim never prepared here is fine."""
        cdi.check_uid(uid)
        async with self._claim(uid):
            entry = self.checkpoint.get(uid)
            self._remove(uid)
        if entry is not None:
            log.info("claim unprepared", extra={"claim": entry.claim.key, "claim_uid": uid})

    def _remove(self, uid: str) -> None:
        cdi.remove(self.cdi_dir, uid)
        regions.remove(self.root, uid)
        self.checkpoint.drop(uid)

    def prepared(self) -> dict[str, ClaimShares]:
        """uid -> shares of every claim prepared on this node (exporter, watchdog)."""
        return {uid: e.claim for uid, e in self.checkpoint.entries.items()}

    def gangs(self) -> set[tuple[str, str]]:
        """(namespace, gang) of every prepared claim with a gang: directories their CDI specs
        mount, which the watchdog's sweep keeps (a pod that uses a claim the kubelet had
        prepared before names its own gang, or none, and still gets the claim's)."""
        return {(c.namespace, c.gang) for c in self.prepared().values() if c.gang}

    # ---- status.devices and the claim's pods
    def _report_later(self, c: ClaimShares, *, refresh_pods: bool) -> None:
        task = asyncio.create_task(self._report(c, refresh_pods=refresh_pods))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _follow_pods(self, c: ClaimShares, claim: Mapping[str, Any]) -> None:
        """Record the claim's current pods (exporter labels, watchdog events), if it is the
        one prepared and still prepared."""
        pods = claims.reserved_pods(claim)
        if (claim.get("metadata") or {}).get("uid") != c.uid or pods == c.pods:
            return
        async with self._claim(c.uid):
            entry = self.checkpoint.get(c.uid)
            if entry is not None:
                self.checkpoint.put(dataclasses.replace(entry.claim, pods=pods))

    async def _report(self, c: ClaimShares, *, refresh_pods: bool, attempts: int = 5,
                      backoff_s: float = 1.0) -> None:
        if refresh_pods:  # else the sweep corrects them when it reads the claim
            with contextlib.suppress(kerrors.APIError):
                await self._follow_pods(c, await self.api.get(c.namespace, c.name))
        for attempt in range(attempts):
            try:
                await self.api.set_devices(
                    c.namespace, c.name, c.uid,
                    lambda old: status_devices(old, c, self.driver, self.node))
                return
            except kerrors.NotFound:
                return  # deleted meanwhile: nothing to report on
            except kerrors.APIError as exc:
                if isinstance(exc, kerrors.Invalid | kerrors.Forbidden) or \
                        attempt == attempts - 1:
                    hint = ("; check the node agent's RBAC: resourceclaims/status patch and "
                            "(Kubernetes >= 1.36) resourceclaims/driver associated-node:patch "
                            f"for {self.driver}" if isinstance(exc, kerrors.Forbidden) else "")
                    log.warning("writing status.devices of the claim failed: %s (the claim "
                                "works; only its status lacks the devices)%s", exc, hint,
                                extra={"claim": c.key})
                    return
            await asyncio.sleep(backoff_s * 2 ** attempt)

    async def stop(self) -> None:
        for t in list(self._reports):
            t.cancel()
        await asyncio.gather(*self._reports, return_exceptions=True)

    # ---- claims that are gone
    def _leftovers(self) -> dict[str, float]:
        """uid -> mtime of the region directories and CDI specs of claims on this node."""
        out = {cr.pod_uid: cr.dir.lstat().st_mtime for cr in regions.scan_claims(self.root)}
        prefix = f"{cdi.KIND.replace('/', '-')}_"
        with contextlib.suppress(FileNotFoundError), os.scandir(self.cdi_dir) as entries:
            for e in entries:
                if e.name.startswith(prefix) and e.name.endswith(".json"):
                    out.setdefault(e.name[len(prefix):-5], e.stat(follow_symlinks=False).st_mtime)
        return out

    async def _stale(self, c: ClaimShares) -> bool:
        """The claim is deleted, re-created or used by no pod any more (its pods are gone and
        the kubelet never unprepared it); False while the API server cannot tell. A claim in
        use gets its current pods recorded."""
        try:
            claim = await self.api.get(c.namespace, c.name)
        except kerrors.NotFound:
            return True
        except kerrors.APIError:
            return False
        if (claim.get("metadata") or {}).get("uid") != c.uid or \
                not (claim.get("status") or {}).get("reservedFor"):
            return True
        await self._follow_pods(c, claim)
        return False

    async def sweep(self, *, now: float | None = None,
                    live_pods: Collection[str] | None = None) -> list[str]:
        """Unprepare claims prepared more than the grace period ago that are stale, and remove
        the region directories and CDI specs of claims the checkpoint does not know once as
        old (a prepare killed before its checkpoint entry); returns the uids removed.
        `live_pods`: the uids of the pods on this node (a fresh list): a claim one of them uses
        is in use, and only the others are read from the API server (None: all of them)."""
        now = time.time() if now is None else now
        orphans = {uid for uid, mtime in self._leftovers().items()
                   if uid not in self.checkpoint.entries and now - mtime >= self.grace_s}
        stale = {uid for uid, e in list(self.checkpoint.entries.items())
                 if now - e.prepared_at >= self.grace_s
                 and (live_pods is None or not any(p in live_pods for _, p in e.claim.pods))
                 and await self._stale(e.claim)}
        gone = set()
        for uid in sorted(orphans | stale):
            with contextlib.suppress(ValueError):  # a file name that is no uid: not ours
                async with self._claim(uid):
                    if uid in stale or uid not in self.checkpoint.entries:  # not prepared now
                        self._remove(uid)
                        gone.add(uid)
        if gone:
            log.info("removed DRA claims that no longer exist", extra={"claim_uids": sorted(gone)})
        return sorted(gone)
