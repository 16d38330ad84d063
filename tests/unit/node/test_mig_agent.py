"""node/mig.py on the fake NVML's MIG model: refusals at start, instances made at Allocate and
found again, cleared when in the way, destroyed after their pod, never under a process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuslice import mig, model
from gpuslice.errors import EnvironmentProblem
from gpuslice.node import mig as node_mig
from gpuslice.node.allocate import AllocateError, Answer
from gpuslice.node.nvml import FakeBackend, MigBusy, MigError
from gpuslice.node.settings import MigConfig
from gpuslice.shim import RegionSpec

H100 = "NVIDIA H100 80GB HBM3"


def fake(tmp_path: Path, **mig_opts: object) -> FakeBackend:
    text = "gpus:\n" + "".join(
        f"- {{uuid: GPU-{i}, model: {H100}, memoryMiB: 81559, mig: {json.dumps(mig_opts)}}}\n"
        for i in range(2))
    (tmp_path / "gpus.yaml").write_text(text)
    return FakeBackend.from_file(str(tmp_path / "gpus.yaml"))


def manager(tmp_path: Path, backend: FakeBackend, **profiles: list[str]) -> node_mig.MigManager:
    return node_mig.start(backend, backend.devices(), MigConfig(profiles=profiles), tmp_path)


def assignment(*slices: tuple[str, str, int]) -> model.PodAssignment:
    sizes = {p.name: p for p in mig.CATALOG["H100-80GB"]}
    return model.PodAssignment(node="n", containers=(model.ContainerAssignment(
        container="c", slices=tuple(model.GPUSlice(
            uuid=u, memory_mib=sizes[p].memory_mib, cores=sizes[p].compute * 100 // 7,
            mig=mig.MigSlice(profile=p, start=s)) for u, p, s in slices)),))


@pytest.mark.parametrize(("opts", "message"), [
    ({"capable": False}, "GPU 0 (GPU-0, NVIDIA H100 80GB HBM3) does not support MIG"),
    ({"enabled": False}, "GPU 0 (GPU-0, NVIDIA H100 80GB HBM3): MIG mode is disabled; an "
                         "administrator enables it with `nvidia-smi -i 0 -mig 1`"),
    ({"enabled": False, "pending": True}, "MIG mode is disabled (enabled, pending a GPU reset"),
])
def test_start_refuses_gpus_without_mig_enabled_and_never_enables_it(tmp_path, opts, message):
    backend = fake(tmp_path, **opts)
    with pytest.raises(EnvironmentProblem) as err:
        manager(tmp_path, backend)
    assert message in str(err.value) and "GPU 1" in str(err.value)
    assert backend.mig_mode("GPU-0") == backend.mig_mode("GPU-1"), "mode left as it was"


def test_a_geometry_that_leaves_a_gpu_no_profile_is_refused(tmp_path):
    with pytest.raises(EnvironmentProblem, match=r"leaves GPU 0 .* no profile; it offers 1g"):
        manager(tmp_path, fake(tmp_path), H100=["1g.5gb"])


def test_decorate_publishes_the_geometry_and_the_instances(tmp_path):
    backend = fake(tmp_path)
    backend.mig_create("GPU-1", "7g.80gb", 0)
    m = manager(tmp_path, backend, H100=["1g.10gb", "3g.40gb"])
    gpus = m.decorate((model.GPU(uuid="GPU-0", model=H100, memory_mib=81559),
                       model.GPU(uuid="GPU-1", model=H100, memory_mib=81559)))
    assert [p.name for p in gpus[0].mig.profiles] == ["1g.10gb", "3g.40gb"]
    assert gpus[0].mig.instances == ()
    (inst,) = gpus[1].mig.instances
    assert (inst.profile, inst.start, inst.size) == ("7g.80gb", 0, 8)
    assert inst.uuid.startswith("MIG-")


def test_attach_makes_the_instance_once_and_finds_it_again(tmp_path):
    backend = fake(tmp_path)
    m = manager(tmp_path, backend)
    a = assignment(("GPU-0", "3g.40gb", 4), ("GPU-1", "1g.10gb", 6))
    live = {"uid-a": a}
    first = m.attach("uid-a", a.slices(), live)
    assert len(first) == 2 and all(u.startswith("MIG-") for u in first)
    assert m.attach("uid-a", a.slices(), live) == first, "a retried Allocate gets the same"
    assert [(d.profile, d.start) for d in backend.mig_devices("GPU-0")] == [("3g.40gb", 4)]
    journal = json.loads((tmp_path / "mig.json").read_text())
    assert journal == {"GPU-0@4": {"pod": "uid-a", "profile": "3g.40gb"},
                       "GPU-1@6": {"pod": "uid-a", "profile": "1g.10gb"}}


def test_attach_clears_idle_instances_in_the_way_but_not_under_a_process(tmp_path):
    backend = fake(tmp_path)
    idle = backend.mig_create("GPU-0", "1g.10gb", 0)  # an administrator's, idle
    busy = backend.mig_create("GPU-0", "1g.10gb", 4)
    backend.set_mig_processes("GPU-0", busy.gi_id, [4242])
    m = manager(tmp_path, backend)
    a = assignment(("GPU-0", "3g.40gb", 0))
    (got,) = m.attach("uid-a", a.slices(), {"uid-a": a})
    assert [(d.profile, d.start) for d in backend.mig_devices("GPU-0")] == \
        [("3g.40gb", 0), ("1g.10gb", 4)], "the idle 1g at 0 went, the busy one at 4 stayed"
    assert got != idle.uuid
    b = assignment(("GPU-0", "3g.40gb", 4))
    with pytest.raises(AllocateError, match=r"processes \[4242\] still run on it"):
        m.attach("uid-b", b.slices(), {"uid-a": a, "uid-b": b})
    assert len(backend.mig_devices("GPU-0")) == 2


def test_attach_refuses_to_clear_an_instance_another_live_pod_holds(tmp_path):
    backend = fake(tmp_path)
    m = manager(tmp_path, backend)
    a = assignment(("GPU-0", "3g.40gb", 4))
    m.attach("uid-a", a.slices(), {"uid-a": a})
    forged = assignment(("GPU-0", "7g.80gb", 0))  # a hand-written annotation over a's instance
    with pytest.raises(AllocateError, match="held by another live pod"):
        m.attach("uid-x", forged.slices(), {"uid-a": a, "uid-x": forged})
    assert [(d.profile, d.start) for d in backend.mig_devices("GPU-0")] == [("3g.40gb", 4)]


def test_attach_refuses_a_shared_slice_on_a_mig_node(tmp_path):
    m = manager(tmp_path, fake(tmp_path))
    with pytest.raises(AllocateError, match="gives a shared slice but this node runs MIG"):
        m.attach("uid-a", (model.GPUSlice(uuid="GPU-0", memory_mib=1, cores=0),), {})


def test_reconcile_destroys_gone_pods_instances_keeps_live_ones_and_busy_ones(tmp_path):
    backend = fake(tmp_path)
    admin = backend.mig_create("GPU-1", "7g.80gb", 0)
    m = manager(tmp_path, backend)
    a, b = assignment(("GPU-0", "3g.40gb", 0)), assignment(("GPU-0", "3g.40gb", 4))
    m.attach("uid-a", a.slices(), {"uid-a": a, "uid-b": b})
    m.attach("uid-b", b.slices(), {"uid-a": a, "uid-b": b})
    gi_b = next(d.gi_id for d in backend.mig_devices("GPU-0") if d.start == 4)
    backend.set_mig_processes("GPU-0", gi_b, [77])
    assert m.reconcile({"uid-a": a}) == [], "b's instance runs a process: kept"
    assert m.reconcile({}) == ["GPU-0@0"]
    backend.set_mig_processes("GPU-0", gi_b, [])
    assert m.reconcile({}) == ["GPU-0@4"]
    assert backend.mig_devices("GPU-0") == ()
    assert [d.uuid for d in backend.mig_devices("GPU-1")] == [admin.uuid], "not ours: kept"
    assert json.loads((tmp_path / "mig.json").read_text()) == {}


def test_reconcile_drops_journal_entries_of_instances_never_made(tmp_path):
    m = manager(tmp_path, fake(tmp_path))
    (tmp_path / "mig.json").write_text(json.dumps({"GPU-0@4": {"pod": "uid-a",
                                                               "profile": "3g.40gb"}}))
    assert m.reconcile({}) == []
    assert json.loads((tmp_path / "mig.json").read_text()) == {}


def test_answer_gives_the_mig_devices_and_no_library(tmp_path):
    m = manager(tmp_path, fake(tmp_path))
    a = Answer(pod_key="ns/p", pod_uid="u", container="c", gpus=("GPU-0",),
               envs={"LD_PRELOAD": "x"}, mounts=(), cdi_devices=(), region_host_dir="/r",
               region=RegionSpec(device_uuids=("GPU-0",), limits=(1,)))
    got = m.answer(a, ["MIG-1", "MIG-2"], cdi=False)
    assert got.envs == {"NVIDIA_VISIBLE_DEVICES": "MIG-1,MIG-2", "GPUSLICE_MIG_DEVICES":
                        "MIG-1,MIG-2"} and got.mounts == ()
    got = m.answer(a, ["MIG-1"], cdi=True)
    assert got.envs["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert got.cdi_devices == ("nvidia.com/gpu=MIG-1",)


def test_the_fake_models_nvml_errors(tmp_path):
    backend = fake(tmp_path)
    d = backend.mig_create("GPU-0", "3g.40gb", 0)
    with pytest.raises(MigError, match="Insufficient Resources"):
        backend.mig_create("GPU-0", "2g.20gb", 2)
    with pytest.raises(MigError, match="Invalid Argument"):
        backend.mig_create("GPU-0", "4g.40gb", 4)
    backend.set_mig_processes("GPU-0", d.gi_id, [1])
    with pytest.raises(MigBusy, match="In use"):
        backend.mig_destroy("GPU-0", d.gi_id)
    again = FakeBackend.from_file(str(tmp_path / "gpus.yaml"))
    assert again.mig_devices("GPU-0")[0].uuid == d.uuid, "instances outlive the process"
    backend.set_mig_processes("GPU-0", d.gi_id, [])
    backend.mig_destroy("GPU-0", d.gi_id)
    assert backend.mig_create("GPU-0", "3g.40gb", 0).uuid != d.uuid, "a new instance, new UUID"


def test_reconcile_keeps_an_instance_a_live_pod_names_after_a_swap_of_assignments(tmp_path):
    backend = fake(tmp_path)
    m = manager(tmp_path, backend)
    a, b = assignment(("GPU-0", "3g.40gb", 0)), assignment(("GPU-0", "3g.40gb", 4))
    m.attach("uid-a", a.slices(), {"uid-a": a, "uid-b": b})
    m.attach("uid-b", b.slices(), {"uid-a": a, "uid-b": b})
    # the kubelet admitted them the other way round: the agent swapped their annotations
    assert m.reconcile({"uid-a": b, "uid-b": a}) == []
    assert len(backend.mig_devices("GPU-0")) == 2
    assert json.loads((tmp_path / "mig.json").read_text())["GPU-0@0"]["pod"] == "uid-b"


def test_nvml_failures_refuse_allocate_and_never_destroy_blind(tmp_path, monkeypatch):
    backend = fake(tmp_path)
    m = manager(tmp_path, backend)
    a = assignment(("GPU-0", "1g.10gb", 0))
    m.attach("uid-a", a.slices(), {"uid-a": a})

    def unreadable(*_):
        raise MigError("nvmlDeviceGetComputeRunningProcesses on GPU GPU-0: Unknown Error")
    monkeypatch.setattr(backend, "mig_processes", unreadable)
    assert m.reconcile({}) == [], "processes unknown: kept"
    assert len(backend.mig_devices("GPU-0")) == 1
    monkeypatch.setattr(backend, "mig_devices", unreadable)
    with pytest.raises(AllocateError, match=r"MIG: .*Unknown Error"):
        m.attach("uid-b", assignment(("GPU-0", "1g.10gb", 3)).slices(), {})
    assert m.reconcile({}) == []
    gpus = m.decorate((model.GPU(uuid="GPU-0", model=H100, memory_mib=81559),))
    assert gpus[0].mig == mig.MigGPU(profiles=()), "published with nothing to place on"


def test_hidden_gpus_are_not_checked(tmp_path):
    backend = fake(tmp_path, enabled=False)
    with pytest.raises(EnvironmentProblem, match="GPU 1"):
        node_mig.start(backend, backend.devices(), MigConfig(), tmp_path, hidden=["GPU-0"])
    node_mig.start(backend, backend.devices(), MigConfig(), tmp_path, hidden=["GPU-0", "1"])
