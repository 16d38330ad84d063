"""The REAL kubelet on this machine, for the node tier (tests/integration/real_node/) and
benchmarks/real_node_burst.py: Kubernetes v1.36 from tools/kube/build.sh, no emulator.

What runs, each a child process in a session of its own (Ctrl-C reaches only us, and we stop
them in order) that gets SIGTERM if this process dies (PR_SET_PDEATHSIG; start them from the
main thread):
  node     fake-cri (k8s.io/cri-client/pkg/fake: sandboxes and containers exist only in its
           memory), the kubelet against it, and `gpuslice node-agent --gpu-backend fake:N`,
           which serves its device plugins in the kubelet's fixed /var/lib/kubelet/device-plugins/
  cluster  `gpuslice webhook` (a MutatingWebhookConfiguration for one namespace), `gpuslice
           scheduler` (the extender) and kube-scheduler configured from
           deploy/scheduler/kube-scheduler-config.yaml, against a ControlPlane (envtest.py)

The kubelet CHANGES THE HOST, whatever --root-dir says: six sysctls (vm.overcommit_memory,
vm.panic_on_oom, kernel.panic, kernel.panic_on_oops, kernel.keys.root_max{keys,bytes}),
/var/lib/kubelet/device-plugins/ (fixed), /var/log/containers, and a bind mount of its root
dir onto itself (rshared). HostGuard records all of it before the kubelet starts, in a journal
(/var/tmp/gpuslice-real-kubelet/journal.json) first, and restores it when the node stops: on
success, failure, Ctrl-C or SIGTERM (turned into KeyboardInterrupt while a node runs). A run
killed outright (SIGKILL, os._exit) leaves the journal: the next HostGuard finds it, stops the
processes it names (if still ours) and restores the host from it before anything else.
One such kubelet per machine (the device plugin directory is fixed): an flock on
/var/tmp/gpuslice-real-kubelet/lock.

`python -m kubelet.real hold --kubeconfig FILE --assets DIR` (from tests/) starts a node,
prints one JSON line when it is Ready and holds it until SIGINT/SIGTERM (the host-restore tests
signal it).
Tests: tests/integration/real_node/
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import contextlib
import ctypes
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

NODE = "gpuslice-real-node"
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")  # the kubelet's, whatever --root-dir
CHECKPOINT = DEVICE_PLUGIN_DIR / "kubelet_internal_checkpoint"
KUBELET_SYSCTLS = {  # what the kubelet sets at start (its setupKernelTunables), v1.36
    "vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
    "kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000"}
SYSCTLS = tuple(KUBELET_SYSCTLS)
KUBELET_DIRS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers")
GUARD_DIR = Path("/var/tmp/gpuslice-real-kubelet")
REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from gpuslice.cli import main; sys.exit(main())"]
GPU_RESOURCES = ("nvidia.com/gpu", "volcano.sh/vgpu-number", "tencent.com/vcuda-core")
_MAX_ENTRIES = 20_000  # a kubelet directory bigger than this is someone else's node


class HostError(RuntimeError):
    """The real kubelet cannot run here, or did not start; the message says why."""


def cannot_run(assets: Any) -> str | None:
    """Why the real kubelet tier cannot run on this machine, or None."""
    if not sys.platform.startswith("linux"):
        return "the real kubelet tier needs Linux"
    if os.geteuid() != 0:
        return ("the real kubelet needs root (it sets sysctls, bind-mounts its root dir and "
                "serves /var/lib/kubelet/device-plugins/)")
    missing = [n for n, p in (("kubelet", assets.kubelet), ("fake-cri", assets.fake_cri),
                              ("kube-scheduler", assets.kube_scheduler),
                              # its node lifecycle controller lifts the not-ready taint
                              ("kube-controller-manager", assets.kube_controller_manager))
               if p is None]
    if missing:
        return (f"{assets.folder} has no {', '.join(missing)}: build them with "
                "`bash tools/kube/build.sh` (docs/development.md)")
    if _live_socket(DEVICE_PLUGIN_DIR / "kubelet.sock") and not (GUARD_DIR / "journal.json"
                                                                  ).exists():
        return ("a kubelet already serves /var/lib/kubelet/device-plugins/kubelet.sock on this "
                "machine; the tier runs only where no other kubelet does")
    return None


def _live_socket(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


# ---------------------------------------------------------------- the host: record, restore

def _unescape(path: str) -> str:
    """A mount point as /proc/self/mountinfo writes it (octal escapes) -> the path."""
    return path.encode().decode("unicode_escape") if "\\" in path else path


def mount_points() -> list[str]:
    """Every mount point, in mount order (duplicates kept: a path can be mounted twice)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        out.append(_unescape(line.split()[4]))
    return out


def _mounted_under(path: str) -> bool:
    return any(m == path or m.startswith(path + "/") for m in mount_points())


def _entries(top: str) -> list[str] | None:
    """Every path under `top` (not following links), or None when `top` does not exist."""
    if not os.path.lexists(top):
        return None
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        out.extend(os.path.join(dirpath, n) for n in dirnames + filenames)
        if len(out) > _MAX_ENTRIES:
            raise HostError(f"{top} holds more than {_MAX_ENTRIES} entries: this machine looks "
                            "like a Kubernetes node; the real kubelet tier must not run here")
    return sorted(out)


@dataclass(frozen=True)
class HostState:
    """What the kubelet changes on the host: sysctls, mount points, its fixed directories (and
    what they hold), with their modes."""

    sysctls: dict[str, str]
    mounts: list[str]
    dirs: dict[str, list[str] | None]  # path -> entries under it, None: did not exist
    modes: dict[str, int | None]

    @classmethod
    def capture(cls, dirs: tuple[str, ...] = KUBELET_DIRS) -> HostState:
        sysctls = {}
        for name in SYSCTLS:
            with contextlib.suppress(OSError):
                sysctls[name] = Path("/proc/sys", name).read_text().strip()
        modes = {d: (os.lstat(d).st_mode if os.path.lexists(d) else None) for d in dirs}
        return cls(sysctls, mount_points(), {d: _entries(d) for d in dirs}, modes)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostState:
        return cls(**data)

    def differences(self, now: HostState) -> list[str]:
        """What differs in `now`, one line each ([] when the host is as recorded)."""
        out = [f"sysctl {k.replace('/', '.')}: {v} -> {now.sysctls.get(k)}"
               for k, v in self.sysctls.items() if now.sysctls.get(k) != v]
        extra = list(now.mounts)
        for m in self.mounts:
            if m in extra:
                extra.remove(m)
        gone = list(self.mounts)
        for m in now.mounts:
            if m in gone:
                gone.remove(m)
        out += [f"mount {m}: new" for m in extra] + [f"mount {m}: gone" for m in gone]
        for d, before in self.dirs.items():
            after = now.dirs.get(d)
            if (before is None) != (after is None):
                out.append(f"{d}: {'created' if before is None else 'removed'}")
            elif before is not None and after is not None and before != after:
                new = sorted(set(after) - set(before))
                out.append(f"{d}: {len(new)} new entries {new[:3]}, "
                           f"{len(set(before) - set(after))} gone")
            if self.modes.get(d) is not None and now.modes.get(d) not in (None, self.modes[d]):
                out.append(f"{d}: mode {self.modes[d]:o} -> {now.modes[d]:o}")
        return out


def restore(before: HostState, under: tuple[str, ...]) -> list[str]:
    """Put the host back as `before` recorded it: unmount what was mounted since under the
    `under` paths (deepest first), write the sysctls back, remove what appeared in the
    kubelet's directories (the directories themselves when they did not exist), restore their
    modes. Returns what it did; raises HostError listing what it could not undo."""
    done, failed = [], []
    now = mount_points()
    extra = list(now)
    for m in before.mounts:
        if m in extra:
            extra.remove(m)
    roots = tuple(os.path.normpath(u) for u in under)
    for m in sorted(extra, key=lambda p: (-p.count("/"), p)):
        if not any(m == r or m.startswith(r + "/") for r in roots):
            continue  # not ours: another process mounted it meanwhile
        got = subprocess.run(["umount", m], capture_output=True, text=True)
        if got.returncode != 0:
            got = subprocess.run(["umount", "-l", m], capture_output=True, text=True)
        (done if got.returncode == 0 else failed).append(
            f"umount {m}" + ("" if got.returncode == 0 else f": {got.stderr.strip()}"))
    for name, value in before.sysctls.items():
        path = Path("/proc/sys", name)
        try:
            if path.read_text().strip() != value:
                path.write_text(value)
                done.append(f"sysctl {name.replace('/', '.')}={value}")
        except OSError as exc:
            failed.append(f"sysctl {name.replace('/', '.')}={value}: {exc}")
    for d, entries in before.dirs.items():
        try:
            if entries is None:
                if os.path.lexists(d):
                    shutil.rmtree(d)
                    done.append(f"removed {d}")
                continue
            keep = set(entries)
            for p in reversed(_entries(d) or []):  # children before their directories
                if p not in keep and os.path.lexists(p):
                    if os.path.isdir(p) and not os.path.islink(p):
                        shutil.rmtree(p)
                    else:
                        os.unlink(p)
                    done.append(f"removed {p}")
            mode = before.modes.get(d)
            if mode is not None and os.lstat(d).st_mode != mode:
                os.chmod(d, mode & 0o7777)
                done.append(f"chmod {mode & 0o7777:o} {d}")
        except OSError as exc:
            failed.append(f"{d}: {exc}")
    if failed:
        raise HostError("could not restore the host after the real kubelet: "
                        + "; ".join(failed))
    return done


def _pid_is(pid: int, command: list[str]) -> bool:
    """Whether `pid` still runs `command` (so a recycled pid is never signalled)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == \
            [c.encode() for c in command]
    except OSError:
        return False


class HostGuard:
    """Holds the machine's one real-kubelet slot: the lock, the journal of the host as it was,
    and the restore. acquire() before the kubelet starts, release() after it stopped."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.before: HostState | None = None
        self.recovered: list[str] = []  # what acquire() undid for a run that died
        self._lock: Any = None
        self._pids: list[tuple[int, list[str]]] = []

    @property
    def journal(self) -> Path:
        return GUARD_DIR / "journal.json"

    def acquire(self, timeout: float = 240.0) -> HostState:
        deadline = time.monotonic() + timeout
        while True:
            GUARD_DIR.mkdir(parents=True, exist_ok=True)
            lock = (GUARD_DIR / "lock").open("a")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # the holder before us removes the file when it is done: a lock on a file
                # that is no longer at the path is no lock; take the new one
                if os.path.exists(lock.name) and \
                        os.fstat(lock.fileno()).st_ino == os.stat(lock.name).st_ino:
                    self._lock = lock
                    break
                lock.close()
            except (BlockingIOError, FileNotFoundError):
                lock.close()
                if time.monotonic() > deadline:
                    raise HostError("another real kubelet harness holds "
                                    f"{GUARD_DIR / 'lock'} (one kubelet per machine)") from None
                time.sleep(0.5)
        self.recovered = recover()
        self.before = HostState.capture()
        self._write()
        return self.before

    def _write(self) -> None:
        assert self.before is not None
        tmp = self.journal.with_suffix(".tmp")
        tmp.write_text(json.dumps({"before": asdict(self.before), "under": [str(self.work),
                                   *KUBELET_DIRS], "work": str(self.work),
                                   "pids": self._pids, "owner": os.getpid()}))
        os.replace(tmp, self.journal)

    def child(self, pid: int, command: list[str]) -> None:
        """Record a child, so that a run that dies has it stopped by the next one."""
        self._pids.append((pid, command))
        self._write()

    def release(self) -> list[str]:
        """Restore the host (children must be stopped) and give the slot back."""
        if self._lock is None:
            return []
        try:
            assert self.before is not None
            done = restore(self.before, (str(self.work), *KUBELET_DIRS))
            self.journal.unlink(missing_ok=True)
            (GUARD_DIR / "lock").unlink(missing_ok=True)  # nothing of ours left on the host
            with contextlib.suppress(OSError):
                GUARD_DIR.rmdir()
            return done
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def recover() -> list[str]:
    """After a run that died without restoring (its journal is there and nobody holds the
    lock: call with the lock held): stop the children it names, restore the host it recorded,
    remove its work dir. Returns what was done ([] when there was nothing to do)."""
    path = GUARD_DIR / "journal.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    done = []
    for pid, command in reversed(data.get("pids", [])):
        if _pid_is(pid, command):
            os.kill(pid, signal.SIGKILL)
            done.append(f"killed {Path(command[0]).name} (pid {pid})")
    time.sleep(0.2 if done else 0)
    done += restore(HostState.from_json(data["before"]), tuple(data["under"]))
    work = data.get("work")
    if work and os.path.isdir(work) and not _mounted_under(work):
        shutil.rmtree(work, ignore_errors=True)
        done.append(f"removed {work}")
    path.unlink()
    return done


# ---------------------------------------------------------------- processes

def _die_with_parent() -> None:
    """preexec_fn: SIGTERM when the parent (thread) dies (PR_SET_PDEATHSIG = 1)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    """A child process with its log file."""

    name: str
    command: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    returncode: int | None = None

    def start(self, guard: HostGuard | None = None, env: dict[str, str] | None = None) -> Proc:
        if threading.current_thread() is not threading.main_thread():
            raise HostError("start children from the main thread (PR_SET_PDEATHSIG follows "
                            "the thread that forks)")
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          preexec_fn=_die_with_parent, env=env)
        self.returncode = None
        if guard is not None:
            guard.child(self.popen.pid, self.command)
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; the exit code (None if never started)."""
        if self.popen is None:
            return self.returncode
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.returncode = self.popen.returncode
        self.popen = None
        return self.returncode

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def failure(self, why: str) -> HostError:
        return HostError(f"{self.name} {why}\ncommand: {' '.join(self.command)}\n"
                         f"log ({self.log}):\n{self.tail()}")


def _wait(cond: Callable[[], object], what: str, timeout: float, *procs: Proc,
          step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            if p.popen is not None and p.popen.poll() is not None:
                raise p.failure(f"exited with code {p.popen.returncode} while waiting for {what}")
        with contextlib.suppress(OSError, ValueError):
            got = cond()
            if got:
                return got
        if time.monotonic() > deadline:
            tails = "".join(f"\n--- {p.name} ({p.log}):\n{p.tail(1500)}" for p in procs)
            raise HostError(f"timed out after {timeout:.0f} s waiting for {what}{tails}")
        time.sleep(step)


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=2, context=context) as r:
        return bool(r.status == 200)


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(name, ((label, value), ...)): value} (enough for our counters)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        pairs = []
        for part in labels.rstrip("}").split('",') if labels else ():
            k, _, v = part.partition('="')
            pairs.append((k.strip(), v.rstrip('"')))
        out[(name, tuple(sorted(pairs)))] = float(value)
    return out


RECHECKS = "gpuslice_scheduler_flight_rechecks_total"


def metric(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float:
    """The sum of `name` over the series that carry `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= set(ls))


# ---------------------------------------------------------------- the node

@dataclass
class RealNode:
    """fake-cri + the real kubelet + the node agent on this machine, against `kubeconfig`."""

    assets: Any  # kubeapi.envtest.Assets
    kubeconfig: Path
    gpus: int = 4
    name: str = NODE
    agent_settings: dict[str, Any] = field(default_factory=dict)
    work: Path = field(init=False)
    guard: HostGuard = field(init=False)
    cri: Proc = field(init=False)
    kubelet: Proc = field(init=False)
    agent: Proc = field(init=False)
    metrics_port: int = 0
    restored: list[str] = field(default_factory=list)  # what the last stop undid
    exit_codes: dict[str, int | None] = field(default_factory=dict)  # of the last stop
    _old_sigterm: Any = None

    def __post_init__(self) -> None:
        # short: unix socket paths stay under 108 bytes
        self.work = Path(tempfile.mkdtemp(prefix="gsrk-", dir="/tmp"))
        self.guard = HostGuard(self.work)

    # paths
    @property
    def root_dir(self) -> Path:
        return self.work / "root"

    @property
    def pod_resources_socket(self) -> Path:
        return self.root_dir / "pod-resources" / "kubelet.sock"

    @property
    def state_dir(self) -> Path:
        return self.work / "state"

    @property
    def cri_socket(self) -> Path:
        return self.work / "cri.sock"

    def _kubelet_config(self) -> Path:
        endpoint = f"unix://{self.cri_socket}"
        cfg = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
               "cgroupsPerQOS": False, "enforceNodeAllocatable": [], "failSwapOn": False,
               "failCgroupV1": False, "cgroupDriver": "cgroupfs", "readOnlyPort": 0,
               "address": "127.0.0.1", "port": free_port(), "healthzBindAddress": "127.0.0.1",
               "healthzPort": self._healthz_port,
               "authentication": {"anonymous": {"enabled": False},
                                  "webhook": {"enabled": False}},
               "authorization": {"mode": "AlwaysAllow"},
               "containerRuntimeEndpoint": endpoint, "imageServiceEndpoint": endpoint,
               # its own logs under the root dir (only /var/log/containers stays fixed)
               "podLogsDir": str(self.root_dir / "pod-logs"),
               # capacity changes (device plugins registering) reach the Node within ~1 s;
               # an unchanged status is still posted only every 5 minutes
               "nodeStatusUpdateFrequency": "1s", "nodeStatusReportFrequency": "5m"}
        path = self.work / "kubelet.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def start(self, timeout: float = 60.0) -> RealNode:
        """Record the host, start the three processes, wait until the Node is Ready and
        untainted and its capacity shows every GPU resource. On failure everything started
        is stopped and the host restored."""
        self.guard.acquire()
        self._old_sigterm = signal.getsignal(signal.SIGTERM)
        if threading.current_thread() is threading.main_thread() and \
                self._old_sigterm in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
        atexit.register(self.stop)
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        logs = self.work
        self.cri = Proc("fake-cri", [str(self.assets.fake_cri), "--endpoint",
                                     f"unix://{self.cri_socket}", "--image-size", "1048576"],
                        logs / "fake-cri.log").start(self.guard)
        _wait(self.cri_socket.exists, "fake-cri's socket", 20, self.cri)
        self._healthz_port = free_port()
        self.kubelet = Proc("kubelet", [
            str(self.assets.kubelet), f"--config={self._kubelet_config()}",
            f"--kubeconfig={self.kubeconfig}", f"--hostname-override={self.name}",
            f"--root-dir={self.root_dir}", f"--cert-dir={self.work / 'kubelet-pki'}", "--v=2"],
            logs / "kubelet.log")
        self.start_kubelet()
        lib = self.work / "libgpuslice.so"  # containers never run it here (no GPU, fake CRI)
        lib.write_bytes(b"\x7fELF not really")
        self.metrics_port = free_port()
        cfg = self.work / "node-agent.yaml"
        cfg.write_text(yaml.safe_dump({
            "nodeName": self.name, "gpuBackend": f"fake:{self.gpus}",
            "devicePluginDir": str(DEVICE_PLUGIN_DIR),
            "podResourcesSocket": str(self.pod_resources_socket),
            "stateDir": str(self.state_dir), "metricsAddress": f"127.0.0.1:{self.metrics_port}",
            "kubeconfig": str(self.kubeconfig), "logLevel": "info",
            "verifyIntervalSeconds": 2, **self.agent_settings}))
        self.agent = Proc("node-agent", [*CLI, "node-agent", "--config", str(cfg),
                                         "--library", str(lib)], logs / "node-agent.log")
        self.agent.start(self.guard)
        _wait(lambda: _http_ok(f"http://127.0.0.1:{self.metrics_port}/readyz"),
              "the node agent registered with the kubelet", timeout, self.agent, self.kubelet)
        self.wait_ready(timeout)

    def start_kubelet(self) -> None:
        self.kubelet.start(self.guard)
        _wait(lambda: _http_ok(f"http://127.0.0.1:{self._healthz_port}/healthz"),
              "the kubelet's /healthz", 30, self.kubelet, self.cri)

    def stop_kubelet(self) -> int | None:
        return self.kubelet.stop()

    def pause_kubelet(self) -> None:
        """SIGSTOP: the kubelet sees no pod until resume_kubelet (a partition from the API
        server), while its plugins stay registered and its devices healthy (a restart would
        leave it without devices until the plugins register again)."""
        assert self.kubelet.popen is not None
        self.kubelet.popen.send_signal(signal.SIGSTOP)

    def resume_kubelet(self) -> None:
        assert self.kubelet.popen is not None
        self.kubelet.popen.send_signal(signal.SIGCONT)

    def kubelet_socket_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(DEVICE_PLUGIN_DIR / "kubelet.sock")
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_ctime_ns)

    def node(self) -> dict[str, Any] | None:
        """The Node object as the API has it (None if absent)."""
        from lightkube import ApiError, Client, KubeConfig
        from lightkube.resources.core_v1 import Node

        from gpuslice.kube.client import dict_view

        try:
            return dict(Client(config=KubeConfig.from_file(self.kubeconfig)).get(
                dict_view(Node), self.name))
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def node_ready(self) -> bool:
        """Ready, untainted, every GPU resource allocatable, and the agent's inventory on it."""
        n = self.node()
        if n is None:
            return False
        conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
        alloc = n.get("status", {}).get("allocatable", {})
        return conds.get("Ready") == "True" and not n["spec"].get("taints") and \
            all(int(alloc.get(r, "0")) > 0 for r in GPU_RESOURCES) and \
            "gpuslice.io/inventory" in (n["metadata"].get("annotations") or {})

    def wait_ready(self, timeout: float = 60.0) -> None:
        _wait(self.node_ready, f"node {self.name} Ready, untainted, with GPU resources and the "
              "agent's inventory", timeout, self.kubelet, self.agent, self.cri, step=0.2)

    def agent_metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as r:
            return parse_metrics(r.read().decode())

    def agent_log(self) -> list[dict[str, Any]]:
        out = []
        for line in self.agent.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def checkpoint(self) -> list[dict[str, Any]]:
        """The kubelet's device manager checkpoint: one entry per (pod, container, resource)
        with the device IDs it allocated and the Allocate answer it keeps (decoded)."""
        from google.protobuf.json_format import MessageToDict

        from gpuslice.node.proto import deviceplugin_pb2 as pb

        data = json.loads(CHECKPOINT.read_text())["Data"]
        out = []
        for e in data.get("PodDeviceEntries") or []:
            resp = pb.ContainerAllocateResponse.FromString(base64.b64decode(e["AllocResp"]))
            out.append({"pod_uid": e["PodUID"], "container": e["ContainerName"],
                        "resource": e["ResourceName"],
                        "devices": sorted(d for ids in e["DeviceIDs"].values() for d in ids),
                        "envs": dict(resp.envs),
                        "mounts": [(m.container_path, m.host_path, m.read_only)
                                   for m in resp.mounts],
                        "raw": MessageToDict(resp)})
        return out

    def stop(self) -> list[str]:
        """Stop the agent, the kubelet and fake-cri (SIGTERM each, in that order), then restore
        the host and remove the work dir. Idempotent. Returns what the restore did."""
        atexit.unregister(self.stop)
        main = threading.current_thread() is threading.main_thread()
        if main:  # a second Ctrl-C must not cut the restore short: it waits until we are done
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            return self._stop()
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _stop(self) -> list[str]:
        codes = {}
        for p in ("agent", "kubelet", "cri"):
            proc = getattr(self, p, None)
            if proc is not None:
                codes[proc.name] = proc.stop()
        if codes:
            self.exit_codes = codes
        try:
            self.restored = self.guard.release() or self.restored
        finally:
            if self._old_sigterm is not None and \
                    threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, self._old_sigterm)
                self._old_sigterm = None
        if not _mounted_under(str(self.work)):
            shutil.rmtree(self.work, ignore_errors=True)
        return self.restored


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# ---------------------------------------------------------------- the cluster side

def webhook_config(name: str, url: str, ca: bytes, namespace: str) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration, for pods of `namespace` only (so the tier
    never touches other tests' pods); like the chart's, no object selector: a GPU pod labelled
    to opt out reaches the webhook, which denies it (webhook/bypass.py)."""
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [{"name": "pods.gpuslice.io", "admissionReviewVersions": ["v1"],
                          "sideEffects": "None", "timeoutSeconds": 10, "failurePolicy": "Fail",
                          "reinvocationPolicy": "IfNeeded",
                          "clientConfig": {"url": f"{url}/mutate",
                                           "caBundle": base64.b64encode(ca).decode()},
                          "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                     "operations": ["CREATE"], "resources": ["pods"],
                                     "scope": "Namespaced"}],
                          "namespaceSelector": {"matchLabels": {
                              "kubernetes.io/metadata.name": namespace}}}]}


OPT_OUT = ("gpuslice.io/webhook", "disabled")


@dataclass
class Services:
    """`gpuslice webhook`, `gpuslice scheduler` and kube-scheduler for one namespace."""

    plane: Any  # kubeapi.envtest.ControlPlane
    work: Path
    namespace: str = ""
    webhook: Proc | None = None
    extender: Proc | None = None
    scheduler: Any = None  # envtest.Process
    extender_url: str = ""
    webhook_name: str = "gpuslice-real-node"

    def start(self, timeout: float = 60.0) -> Services:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        from kubeapi.certs import make_pki

        self.work.mkdir(parents=True, exist_ok=True)
        self.namespace = f"real-node-{random.randrange(16**6):06x}"
        client = self.client()
        from lightkube.resources.core_v1 import Namespace

        from gpuslice.kube.client import dict_view
        client.create(dict_view(Namespace)({"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": self.namespace}}))
        pki = make_pki()
        files = pki.write(self.work / "webhook-pki")
        port = free_port()
        cfg = self.work / "webhook.yaml"
        cfg.write_text(yaml.safe_dump({
            "address": "127.0.0.1", "port": port, "certFile": str(files["serving.crt"]),
            "keyFile": str(files["serving.key"]), "checkNamespaceLabels": False,
            "kubeconfig": str(self.plane.kubeconfig), "logLevel": "info"}))
        self.webhook = Proc("webhook", [*CLI, "webhook", "--config", str(cfg)],
                            self.work / "webhook.log").start()
        tls = ssl.create_default_context(cafile=str(files["ca.crt"]))
        _wait(lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", tls), "the webhook",
              timeout, self.webhook)
        from lightkube.generic_resource import create_global_resource

        mutating = create_global_resource("admissionregistration.k8s.io", "v1",
                                          "MutatingWebhookConfiguration",
                                          "mutatingwebhookconfigurations")
        client.create(mutating(webhook_config(self.webhook_name, f"https://127.0.0.1:{port}",
                                              pki.ca_cert, self.namespace)))
        ext_port = free_port()
        cfg = self.work / "scheduler.yaml"
        cfg.write_text(yaml.safe_dump({
            "address": "127.0.0.1", "port": ext_port, "kubeconfig": str(self.plane.kubeconfig),
            "logLevel": "info", "leaderElection": {"enabled": False}}))
        self.extender = Proc("extender", [*CLI, "scheduler", "--config", str(cfg)],
                             self.work / "scheduler.log").start()
        self.extender_url = f"http://127.0.0.1:{ext_port}"
        _wait(lambda: _http_ok(f"{self.extender_url}/readyz"), "the extender", timeout,
              self.extender)
        deploy = yaml.safe_load((REPO / "deploy/scheduler/kube-scheduler-config.yaml")
                                .read_text())
        self.scheduler = self.plane.start_scheduler({
            **deploy, "extenders": [{**deploy["extenders"][0], "urlPrefix": self.extender_url}],
            "leaderElection": {"leaderElect": False}})

    def client(self) -> Any:
        from lightkube import Client, KubeConfig

        return Client(config=KubeConfig.from_file(self.plane.kubeconfig))

    def extender_metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(f"{self.extender_url}/metrics", timeout=5) as r:
            return parse_metrics(r.read().decode())

    def stop(self) -> None:
        """Stop kube-scheduler, the extender and the webhook; delete the webhook configuration
        and the namespace (best effort: the API may be gone already)."""
        if self.scheduler is not None:
            self.scheduler.stop()
            with contextlib.suppress(ValueError):
                self.plane.processes.remove(self.scheduler)
            self.scheduler = None
        with contextlib.suppress(Exception):
            from lightkube.generic_resource import create_global_resource
            from lightkube.resources.core_v1 import Namespace

            client = self.client()
            mutating = create_global_resource("admissionregistration.k8s.io", "v1",
                                              "MutatingWebhookConfiguration",
                                              "mutatingwebhookconfigurations")
            client.delete(mutating, self.webhook_name)
            if self.namespace:
                client.delete(Namespace, self.namespace)
        for p in (self.extender, self.webhook):
            if p is not None:
                p.stop()


# ---------------------------------------------------------------- the whole tier

@dataclass
class Tier:
    """The node and the services against one control plane, and what tests need of them."""

    plane: Any
    gpus: int = 4
    node: RealNode | None = None
    services: Services | None = None

    def start(self) -> Tier:
        """Empty the cluster (leftover nodes of other tests would take pods), then start the
        node and the services."""
        self.plane.reset()
        try:
            self.node = RealNode(self.plane.assets, self.plane.kubeconfig, gpus=self.gpus).start()
            self.services = Services(self.plane, self.node.work.with_name(
                self.node.work.name + "-svc")).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> list[str]:
        restored: list[str] = []
        if self.services is not None:
            self.services.stop()
            shutil.rmtree(self.services.work, ignore_errors=True)
            self.services = None
        if self.node is not None:
            restored = self.node.stop()
            with contextlib.suppress(Exception):  # the cluster as we found it (best effort)
                from lightkube.resources.coordination_v1 import Lease
                from lightkube.resources.core_v1 import Node

                client = self.plane_client()
                client.delete(Node, self.node.name)
                client.delete(Lease, self.node.name, namespace="kube-node-lease")
            self.node = None
        return restored

    def plane_client(self) -> Any:
        from lightkube import Client, KubeConfig

        return Client(config=KubeConfig.from_file(self.plane.kubeconfig))

    def ensure(self) -> RealNode:
        """The node running and Ready: started afresh if a test stopped it (or a process
        died), the kubelet restarted if the API lost its Node (another test's reset)."""
        n = self.node
        procs = [getattr(n, p, None) for p in ("cri", "kubelet", "agent")] if n else []
        if n is None or not all(p is not None and p.running for p in procs):
            if n is not None:
                n.stop()
            self.node = n = RealNode(self.plane.assets, self.plane.kubeconfig,
                                     gpus=self.gpus).start()
        elif not n.node_ready():
            if n.node() is None:  # a kubelet registers its Node once, at start
                n.stop_kubelet()
                n.start_kubelet()
            n.wait_ready()
        return n

    @property
    def namespace(self) -> str:
        assert self.services is not None
        return self.services.namespace

    def client(self) -> Any:
        assert self.services is not None
        return self.services.client()

    def wait_pods(self, names: list[str], phase: str = "Running",
                  timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """The namespace's pods `names` once all are in `phase` (Running: the kubelet admitted
        them, so the agent answered their Allocate calls and their flights have ended);
        AssertionError with their state and the namespace's events if they are not within
        `timeout`."""
        from lightkube.resources.core_v1 import Event, Pod

        from gpuslice.kube.client import dict_view

        client, ns = self.client(), self.namespace
        deadline = time.monotonic() + timeout
        while True:
            pods = {n: dict(client.get(dict_view(Pod), n, namespace=ns)) for n in names}
            if all(p["status"].get("phase") == phase for p in pods.values()):
                return pods
            if time.monotonic() > deadline:
                state = {n: (p["spec"].get("nodeName"), p["status"].get("phase"),
                             p["status"].get("message"), (p["metadata"].get("annotations")
                                                          or {}).get("gpuslice.io/allocated"))
                         for n, p in pods.items()}
                events = [(e["involvedObject"]["name"], e["reason"], e["message"][:200])
                          for e in client.list(dict_view(Event), namespace=ns)]
                raise AssertionError(f"pods not {phase} after {timeout:.0f} s: {state}; "
                                     f"events: {events}")
            time.sleep(0.2)

    def clean(self) -> None:
        """Delete the namespace's pods (grace 0) and wait until the API has none left."""
        from lightkube.resources.core_v1 import Pod

        client = self.client()
        client.deletecollection(Pod, namespace=self.namespace, grace_period=0)
        _wait(lambda: not list(client.list(Pod, namespace=self.namespace)),
              "the namespace's pods gone", 30)
        n = self.node
        if n is not None and getattr(n, "kubelet", None) is not None and n.kubelet.running:
            # the kubelet lets go of their devices once it has dropped the pods
            from gpuslice.node.verify import list_pod_resources

            _wait(lambda: not any(ns == self.namespace for ns, _ in asyncio.run(
                list_pod_resources(str(n.pod_resources_socket)))),
                "the kubelet done with the namespace's pods", 30, n.kubelet)


@contextlib.contextmanager
def outside_namespace(tier: Tier) -> Iterator[str]:
    """A namespace the tier's webhook never sees (as an opted-out one): pods created there skip
    gpuslice altogether. Its pods are deleted (grace 0) on the way out; the namespace stays
    (no namespace controller runs here)."""
    from lightkube.resources.core_v1 import Namespace, Pod

    from gpuslice.kube.client import dict_view

    client, name = tier.client(), f"{tier.namespace}-out"
    with contextlib.suppress(Exception):  # a second use in the session
        client.create(dict_view(Namespace)({"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": name}}))
    try:
        yield name
    finally:
        client.deletecollection(Pod, namespace=name, grace_period=0)
        _wait(lambda: not list(client.list(Pod, namespace=name)), "the outside pods gone", 30)


def wait_phase(client: Any, name: str, namespace: str, phase: str,
               timeout: float = 60.0) -> dict[str, Any]:
    """Pod `name` once it is in `phase` (AssertionError with its status if not in time)."""
    from lightkube.resources.core_v1 import Pod

    from gpuslice.kube.client import dict_view

    deadline = time.monotonic() + timeout
    while True:
        pod = dict(client.get(dict_view(Pod), name, namespace=namespace))
        if pod["status"].get("phase") == phase:
            return pod
        if time.monotonic() > deadline:
            raise AssertionError(f"{namespace}/{name} not {phase} after {timeout:.0f} s: "
                                 f"{pod['status']}")
        time.sleep(0.2)


def pod_body(name: str, namespace: str, limits: dict[str, str], **extra: Any) -> dict[str, Any]:
    """A GPU pod as a user writes it (the webhook does the rest)."""
    containers = extra.pop("containers", None) or [
        {"name": "main", "image": "registry.invalid/cuda:never-pulled",
         "resources": {"limits": dict(limits)}}]
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    for key in ("labels", "annotations"):
        if key in extra:
            meta[key] = extra.pop(key)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": containers, "terminationGracePeriodSeconds": 0, **extra}}


# ---------------------------------------------------------------- the burst

BURST_SHAPES: tuple[tuple[dict[str, str], int], ...] = (  # limits as users write them, weight
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}, 3),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048", "nvidia.com/gpucores": "5"}, 2),
    ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}, 1),
    ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1024",
      "volcano.sh/vgpu-cores": "10"}, 2),
    ({"tencent.com/vcuda-core": "10", "tencent.com/vcuda-memory": "4"}, 2),
)


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99 (nearest rank) and max, in seconds rounded to the millisecond."""
    if not values:
        return {}
    s = sorted(values)

    def rank(q: float) -> float:
        return s[max(0, min(len(s) - 1, int(-(-q * len(s) // 1)) - 1))]

    return {"p50": round(rank(0.50), 3), "p99": round(rank(0.99), 3), "max": round(s[-1], 3)}


def overcommitted(node: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """GPUs over their memory, cores or slices from the live pods' assignments (the
    allocator's footprint rule), recomputed from the API's objects; and the per-GPU totals."""
    from gpuslice import codec
    from gpuslice.allocator import footprint

    inv = codec.decode_inventory(node["metadata"]["annotations"][codec.INVENTORY_ANNOTATION],
                                 node=node["metadata"]["name"])
    gpus = {g.uuid: g for g in inv.gpus}
    used: dict[str, list[int]] = {u: [0, 0, 0, 0] for u in gpus}
    for p in pods:
        text = (p["metadata"].get("annotations") or {}).get(codec.ASSIGNMENT_ANNOTATION)
        if not text or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for uuid, f in footprint(codec.decode_assignment(text), gpus).items():
            u = used[uuid]
            u[0] += f.mem
            u[1] += f.cores
            u[2] += f.slots
            u[3] += f.excl
    bad = [u for u, (mem, cores, slots, excl) in used.items()
           if mem > gpus[u].memory_mib or cores > 100 or slots > gpus[u].split_count
           or (excl and slots > 1)]
    return {"overcommitted_gpus": len(bad),
            "per_gpu": {u: {"memory_mib": m, "cores": c, "slices": s}
                        for u, (m, c, s, _) in used.items()}}


def devices_vs_assignments(pods: list[dict[str, Any]], checkpoint: list[dict[str, Any]],
                           regions: Path | None = None) -> list[str]:
    """Each assigned container whose devices in the kubelet's checkpoint do not lie exactly on
    its assigned GPUs, whose Allocate answer names other GPUs, or (with `regions`, the agent's
    <stateDir>/regions) whose region holds other GPUs or limits; a device given twice."""
    from gpuslice import codec
    from gpuslice.errors import ShimError
    from gpuslice.shim import Region

    entries = {(e["pod_uid"], e["container"]): e for e in checkpoint}
    wrong = []
    seen_ids: dict[tuple[str, str], str] = {}  # the kubelet counts devices per resource
    for p in pods:
        text = (p["metadata"].get("annotations") or {}).get(codec.ASSIGNMENT_ANNOTATION)
        for c in codec.decode_assignment(text).containers if text else ():
            where = f"{p['metadata']['name']}/{c.container}"
            entry = entries.get((p["metadata"]["uid"], c.container))
            if entry is None:
                wrong.append(f"{where}: not in the kubelet's checkpoint")
                continue
            uuids = [s.uuid for s in c.slices]
            if {d.split("::")[0] for d in entry["devices"]} != set(uuids) or \
                    entry["envs"].get("NVIDIA_VISIBLE_DEVICES") != ",".join(uuids):
                wrong.append(f"{where}: devices {entry['devices']}, assigned {uuids}")
            if regions is not None:
                try:
                    r = Region.read(regions / p["metadata"]["uid"] / c.container / "region")
                    held = [(d.uuid, d.limit >> 20) for d in r.devices if d.uuid]
                except (OSError, ShimError) as exc:  # e.g. mid-swap: the caller looks again
                    held = [("unreadable", str(exc))]  # type: ignore[list-item]
                if held != [(s.uuid, s.memory_mib) for s in c.slices]:
                    wrong.append(f"{where}: region holds {held}")
            for d in entry["devices"]:
                key = (entry["resource"], d)
                if key in seen_ids:
                    wrong.append(f"{where}: {key} also given to {seen_ids[key]}")
                seen_ids[key] = where
    return wrong


async def burst(tier: Tier, count: int = 30, seed: int = 1, timeout: float = 150.0
                ) -> dict[str, Any]:
    """Create `count` GPU pods of mixed shapes at once (through the webhook, kube-scheduler +
    extender, onto the one real kubelet) and time each: create -> bound (what the in-flight
    rule holds), bound -> Running (the kubelet's admission with the agent's Allocate), create
    -> Running; count the scheduling attempts the in-flight rule refused (FailedScheduling
    events, the extender's counter); check that no GPU is over-committed and that each
    container's devices (the kubelet's checkpoint) lie on its assigned GPUs."""
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import Event, Pod

    from gpuslice import handoff
    from gpuslice.kube.client import dict_view

    assert tier.node is not None and tier.services is not None
    ns = tier.namespace
    rng = random.Random(seed)
    shapes = [s for s, w in BURST_SHAPES for _ in range(w)]
    bodies = [pod_body(f"burst-{i:03d}", ns, rng.choice(shapes)) for i in range(count)]
    ext_before = tier.services.extender_metrics()
    refused_before = metric(ext_before, "gpuslice_scheduler_pods_refused_total",
                            reason="waiting for an in-flight pod")
    before = tier.node.agent_metrics()
    swaps_before = metric(before, "gpuslice_allocate_swaps_total")
    marks_before = metric(before, "gpuslice_allocated_marks_total")
    mismatches_before = metric(before, "gpuslice_allocate_mismatches_total")
    client = AsyncClient(config=KubeConfig.from_file(tier.plane.kubeconfig))
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    flight_ended: dict[str, float] = {}  # the kubelet's status or the agent's mark
    running: dict[str, float] = {}
    failed: dict[str, str] = {}
    done = asyncio.Event()

    def seen(pod: dict[str, Any]) -> None:
        name, now = pod["metadata"]["name"], time.monotonic()
        ann = pod["metadata"].get("annotations") or {}
        if pod["spec"].get("nodeName"):
            bound.setdefault(name, now)
        if ann.get(handoff.ALLOCATED) or handoff.admitted(pod):
            flight_ended.setdefault(name, now)
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running":
            running.setdefault(name, now)
        elif phase == "Failed":
            failed[name] = (pod.get("status") or {}).get("message", "")
        if len(running) + len(failed) >= count:
            done.set()

    async def watch() -> None:
        while True:
            with contextlib.suppress(Exception):
                async for _, obj in client.watch(dict_view(Pod), namespace=ns):
                    seen(dict(obj))
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.5)  # the watch is open before the first create

    async def create(body: dict[str, Any]) -> None:
        created[body["metadata"]["name"]] = time.monotonic()
        await client.create(dict_view(Pod)(body))

    t0 = time.monotonic()
    await asyncio.gather(*(create(b) for b in bodies))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), timeout)
    wall = time.monotonic() - t0
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    # the real kubelet may admit interchangeable pods in another order than they were bound:
    # the agent then swaps their assignments after its PodResources check (verify.py); wait
    # for the annotations to say what each container runs with (or 20 s)
    t_done = time.monotonic()
    while True:
        pods = [dict(p) async for p in client.list(dict_view(Pod), namespace=ns)]
        wrong_devices = devices_vs_assignments(pods, tier.node.checkpoint(),
                                               tier.node.state_dir / "regions")
        if not wrong_devices or time.monotonic() - t_done > 20:
            break
        await asyncio.sleep(0.25)
    agreed_s = time.monotonic() - t_done
    uids = {p["metadata"]["uid"] for p in pods}  # this burst's (the namespace keeps events)
    events = [dict(e) async for e in client.list(dict_view(Event), namespace=ns)
              if e["involvedObject"].get("uid") in uids]
    await client.close()
    node = tier.node.node()
    assert node is not None
    waiting = [e for e in events if e.get("reason") == "FailedScheduling" and
               "waiting for pod" in e.get("message", "")]
    held = {e["involvedObject"]["name"] for e in waiting}
    agent = tier.node.agent_metrics()
    ext_after = tier.services.extender_metrics()
    names = [b["metadata"]["name"] for b in bodies]
    shape_of = {b["metadata"]["name"]: ",".join(f"{k.split('/')[1]}={v}" for k, v in sorted(
        b["spec"]["containers"][0]["resources"]["limits"].items())) for b in bodies}
    over = overcommitted(node, pods)
    return {
        "pods": count, "gpus": tier.node.gpus, "running": len(running), "failed": failed,
        "wall_s": round(wall, 3),
        "create_to_bound_s": percentiles([bound[n] - created[n] for n in names if n in bound]),
        # the pods the in-flight rule refused at least once, and the others
        "create_to_bound_s_held": percentiles([bound[n] - created[n] for n in names
                                               if n in bound and n in held]),
        "create_to_bound_s_never_held": percentiles([bound[n] - created[n] for n in names
                                                     if n in bound and n not in held]),
        "bound_to_running_s": percentiles([running[n] - bound[n] for n in names
                                           if n in running and n in bound]),
        "bound_to_flight_end_s": percentiles([flight_ended[n] - bound[n] for n in names
                                              if n in flight_ended and n in bound]),
        "allocated_marks_written": metric(agent, "gpuslice_allocated_marks_total") - marks_before,
        "create_to_running_s": percentiles([running[n] - created[n] for n in names
                                            if n in running]),
        "in_flight_refusals": {
            "failed_scheduling_events": sum(int(e.get("count") or 1) for e in waiting),
            "pods_held": len(held),
            "extender_nogpufit_events": sum(int(e.get("count") or 1) for e in events
                                            if e.get("reason") == "NoGPUFit"),
            "extender_filter_refusals": metric(
                ext_after, "gpuslice_scheduler_pods_refused_total",
                reason="waiting for an in-flight pod") - refused_before,
            # filters that read the pods in flight again first (scheduler/recheck.py)
            "extender_rechecks": {r: metric(ext_after, RECHECKS, result=r)
                                  - metric(ext_before, RECHECKS, result=r)
                                  for r in ("flight ended", "still in flight", "read failed")}},
        "overcommitted_gpus": over["overcommitted_gpus"], "per_gpu": over["per_gpu"],
        "devices_not_on_assigned_gpus": wrong_devices,
        "swaps": {"by_agent": metric(agent, "gpuslice_allocate_swaps_total") - swaps_before,
                  "events": sum(1 for e in events if e.get("reason") == "AllocateSwapped"),
                  "assignments_agree_after_s": round(agreed_s, 3)},
        "agent_mismatches": metric(agent, "gpuslice_allocate_mismatches_total") - mismatches_before,
        "shapes": dict(sorted(
            {s: sum(1 for n in names if shape_of[n] == s) for s in set(shape_of.values())}
            .items())),
    }


def report(name: str, figures: dict[str, Any]) -> None:
    """Print a test's measured figures as one JSON line (`pytest -s` shows it) and write them
    to $GPUSLICE_REAL_NODE_OUT/<name>.json when that variable names a folder."""
    print(json.dumps({name: figures}, sort_keys=True))
    out = os.environ.get("GPUSLICE_REAL_NODE_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(figures, indent=1, sort_keys=True))


# ---------------------------------------------------------------- hold (for the signal tests)

def _hold(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m kubelet.real hold")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--assets", required=True)
    ap.add_argument("--gpus", type=int, default=2)
    a = ap.parse_args(argv)
    folder = Path(a.assets)  # only what RealNode runs (kubeapi's package is not needed here)
    assets = types.SimpleNamespace(folder=folder, kubelet=folder / "kubelet",
                                   fake_cri=folder / "fake-cri")
    node = RealNode(assets, Path(a.kubeconfig), gpus=a.gpus)
    try:
        node.start()
        print(json.dumps({"ready": True, "pids": {p.name: p.popen.pid for p in
                                                  (node.cri, node.kubelet, node.agent)
                                                  if p.popen is not None},
                          "work": str(node.work)}), flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 130
    finally:
        node.stop()
        print(json.dumps({"stopped": True, "restored": node.restored,
                          "exit_codes": node.exit_codes}), flush=True)


class Held:
    """`python -m kubelet.real hold` as a child of ours (a context manager: SIGKILLed on exit
    if still running): line() reads its next JSON line."""

    def __init__(self, kubeconfig: Path, assets: Path, gpus: int = 2) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubelet.real", "hold", "--kubeconfig", str(kubeconfig),
             "--assets", str(assets), "--gpus", str(gpus)],
            cwd=REPO / "tests", stdout=subprocess.PIPE, text=True)

    def line(self, timeout: float = 60.0) -> dict[str, Any]:
        import select

        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        text = self.proc.stdout.readline() if ready else ""
        if not text:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5 if ready else 0)
            raise HostError("`kubelet.real hold` " + (
                f"ended (exit code {self.proc.returncode}; its stderr is in the test's output)"
                if ready else f"said nothing within {timeout:.0f} s"))
        return dict(json.loads(text))

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    if sys.argv[1:2] != ["hold"]:
        sys.exit("usage: python -m kubelet.real hold --kubeconfig FILE --assets DIR")
    sys.exit(_hold(sys.argv[2:]))
