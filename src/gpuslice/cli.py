"""The `gpuslice` command: one click group, each command a thin adapter to a module.

Exit codes: 0 ok, 1 user error (bad input), 2 usage, 3 environment (no driver/GPU/library),
126/127 `gpuslice run` of a program that cannot run / is missing, 130 interrupted. Errors print
`gpuslice: error: ...` lines (one per problem) with the fix; `--debug` shows the traceback.
Tests: tests/unit/test_cli.py (errors, usage), test_cli_run.py (run/top), test_cli_simulate.py
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from gpuslice.errors import GpusliceError, RequestError

EXIT_USAGE = 2  # the other codes live on the error classes (GpusliceError.exit_code)


def _fail(lines: str | list[str], code: int) -> NoReturn:
    """Print each line as `gpuslice: error: ...` on stderr and exit with `code`."""
    for line in (lines.splitlines() if isinstance(lines, str) else lines) or [""]:
        click.echo(f"gpuslice: error: {line}", err=True)
    sys.exit(code)


def _usage_text(exc: click.ClickException) -> str:
    """Click's message as one of our lines: lower-case start, and where to read more."""
    text = re.sub(r"'([^']{60})[^']{20,}'", r"'\1...'", exc.format_message()).rstrip(".")
    text = text[:1].lower() + text[1:]  # a huge value given is shown by its start only
    ctx = getattr(exc, "ctx", None)
    return f"{text}; see `{ctx.command_path} --help`" if ctx is not None else text


class _Group(click.Group):
    """The error contract of every command (docs/troubleshooting.md): a GpusliceError, a usage
    error or an interrupt becomes `gpuslice: error: ...` lines and its exit code; commands added
    to this group get it without doing anything."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GpusliceError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            _fail(exc.problems if isinstance(exc, RequestError) else str(exc), exc.exit_code)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:  # bare `gpuslice`: the help text
            exc.show()
            code = EXIT_USAGE
        except click.ClickException as exc:
            _fail(_usage_text(exc), EXIT_USAGE if isinstance(exc, click.UsageError)
                  else exc.exit_code)
        except click.Abort:
            _fail("interrupted", 130)
        sys.exit(code if isinstance(code, int) else 0)


def _show_version(ctx: click.Context, _: click.Parameter, asked: bool) -> None:
    """As click.version_option, but the version is read only when asked (gpuslice.__version__)."""
    if not asked or ctx.resilient_parsing:
        return
    import gpuslice

    click.echo(f"gpuslice, version {gpuslice.__version__}")
    ctx.exit()


@click.group("gpuslice", cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_show_version,
              help="Show the version and exit.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Share NVIDIA GPUs between pods and processes with hard memory and compute caps."""
    ctx.obj = {"debug": debug}


def _lazy(module: str, attr: str) -> Callable[..., Any]:
    """Import a command's implementation only when it runs (keeps `--help` fast)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(module), attr)(*args, **kwargs)

    return call


@main.command()
@click.option("--cluster", "cluster_file", required=True, type=click.Path(dir_okay=False),
              help="Cluster file (YAML): node groups x GPU models.")
@click.option("--trace", "trace_file", required=True, type=click.Path(dir_okay=False),
              help="Trace file (JSON lines or YAML): arrival, duration, pod spec.")
@click.option("--policy", "policies", multiple=True,
              help="Policy to compare, NODE/GPU or a preset name; repeat for a side-by-side table.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per policy.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@click.option("--jobs", "jobs_file", type=click.Path(dir_okay=False),
              help="Also write each job's node, GPUs, start, wait or never-placed reason to "
                   "this file (.csv or .jsonl), one row per job and policy.")
@click.option("--gpu-mode", type=click.Choice(["as-is", "shim", "mig", "both"]),
              default="as-is", show_default=True,
              help="Shared slices (shim), MIG instances (mig) on every MIG-capable GPU, both "
                   "side by side, or as the cluster file and pods say (docs/mig.md).")
def simulate(cluster_file: str, trace_file: str, policies: tuple[str, ...], as_json: bool,
             no_progress: bool, jobs_file: str | None, gpu_mode: str) -> None:
    """Replay a job trace on a simulated cluster with the real allocator."""
    _lazy("gpuslice.simulate.command", "run")(
        cluster_file=cluster_file, trace_file=trace_file, policies=policies,
        as_json=as_json, progress=not no_progress, jobs_file=jobs_file, gpu_mode=gpu_mode)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--gpu-memory", help="Device-memory cap per GPU: 4GiB, 512Mi, or a bare number of "
              "MiB (4096 = 4 GiB, as HAMi's nvidia.com/gpumem).")
@click.option("--gpu-compute", type=click.IntRange(0, 100),
              help="Compute share in percent of one GPU (0 or 100 = no limit).")
@click.option("--compute-mode", type=click.Choice(["hard", "work-conserving"]),
              help="Compute throttling mode (default hard).")
@click.option("--region", type=click.Path(dir_okay=False),
              help="Shared region file; commands given the same file share one cap "
                   "(default: a private temporary region).")
@click.option("--allow-uncapped", is_flag=True,
              help="Run COMMAND even where no NVIDIA driver is found (nothing is then capped).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(gpu_memory: str | None, gpu_compute: int | None, compute_mode: str | None,
        region: str | None, allow_uncapped: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND with libgpuslice enforcing the given limits (no Kubernetes needed).

    Exits with COMMAND's status; 3 if there is no NVIDIA driver (see --allow-uncapped) or no
    library, 127 if COMMAND does not exist (126: not executable). Signals to gpuslice are passed
    on to COMMAND."""
    sys.exit(_lazy("gpuslice.shim", "run_command")(
        command=list(command), gpu_memory=gpu_memory, gpu_compute=gpu_compute,
        compute_mode=compute_mode, region=region, allow_uncapped=allow_uncapped))


@main.command()
@click.option("--region", type=click.Path(dir_okay=False),
              help="Shared region file (default: $CUDA_DEVICE_MEMORY_SHARED_CACHE, else "
                   "the library's /tmp/gpuslice.region).")
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot as JSON.")
def top(region: str | None, once: bool, as_json: bool) -> None:
    """Show usage against limits per process of a shared region."""
    _lazy("gpuslice.shim", "top_command")(region=region, once=once, as_json=as_json)


@main.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Config file (YAML); GPUSLICE_SCHEDULER_* variables override it.")
@click.option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, else in-cluster).")
@click.option("--port", type=int, help="Port to serve the extender verbs on (default 8888).")
@click.option("--policy", help="Placement policy: binpack, spread, topology or NODE/GPU.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
def scheduler(config_file: str | None, kubeconfig: str | None, port: int | None,
              policy: str | None, log_level: str | None) -> None:
    """Serve the kube-scheduler extender (filter, prioritize, bind) until interrupted."""
    _lazy("gpuslice.scheduler.command", "serve")(
        config_file, kubeconfig=kubeconfig, port=port, policy=policy, logLevel=log_level)


@main.command()
@click.option("--path", "show_path", is_flag=True, help="Print the path of libgpuslice.so.")
def shim(show_path: bool) -> None:
    """Information about the in-container library libgpuslice.so."""
    _lazy("gpuslice.shim", "shim_command")(show_path=show_path)


@main.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Config file (YAML); GPUSLICE_WEBHOOK_* variables override it.")
@click.option("--port", type=click.IntRange(1, 65535), help="HTTPS port (default 8443).")
@click.option("--address", help="Address to listen on (default 0.0.0.0).")
@click.option("--cert-file", help="Serving certificate (PEM); reloaded when it changes.")
@click.option("--key-file", help="Its private key (PEM).")
@click.option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, else in-cluster).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
def webhook(config_file: str | None, **flags: Any) -> None:
    """Serve the admission webhook (HTTPS) until interrupted."""
    _lazy("gpuslice.webhook.command", "run")(config_file, **flags)


@main.command()
@click.option("--service", default="gpuslice-webhook", show_default=True,
              help="The webhook's Service; the certificate names <service>.<namespace>.svc.")
@click.option("--namespace", default="gpuslice-system", show_default=True,
              help="The Service's namespace (and the Secret's).")
@click.option("--dns", multiple=True, help="Another DNS name for the certificate (repeat).")
@click.option("--ip", "ips", multiple=True, help="An IP address for the certificate (repeat).")
@click.option("--days", type=click.IntRange(1, 3650), default=365, show_default=True,
              help="Validity of the serving certificate.")
@click.option("--out-dir", type=click.Path(file_okay=False),
              help="Write ca.crt, ca.key, tls.crt, tls.key here.")
@click.option("--secret", help="Keep them in this kubernetes.io/tls Secret.")
@click.option("--webhook-config", help="Set the caBundle of this MutatingWebhookConfiguration.")
@click.option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, else in-cluster).")
def certgen(**options: Any) -> None:
    """Make (or keep, while valid) the webhook's CA and serving certificate."""
    _lazy("gpuslice.webhook.certgen", "command")(**options)


@main.command("node-agent")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Config file (YAML); GPUSLICE_NODE_* variables override it.")
@click.option("--gpu-backend", help="nvml (default), fake:N (N fake GPUs) or fake:FILE.yaml.")
@click.option("--device-plugin-dir", help="Kubelet device plugin directory "
              "(default /var/lib/kubelet/device-plugins).")
@click.option("--pod-resources-socket", help="Kubelet PodResources socket "
              "(default /var/lib/kubelet/pod-resources/kubelet.sock).")
@click.option("--node-name", help="This node's name (in a DaemonSet: the downward API).")
@click.option("--state-dir", help="Host directory for the library and regions "
              "(default /var/lib/gpuslice).")
@click.option("--metrics-address", help="HOST:PORT for /metrics, /healthz, /readyz "
              "(default 0.0.0.0:9400).")
@click.option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, else in-cluster).")
@click.option("--library", type=click.Path(dir_okay=False),
              help="libgpuslice.so to install for containers (default: the one gpuslice ships).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--remove-dra-slices", is_flag=True,
              help="Uninstall: delete this node's DRA ResourceSlices, then exit.")
def node_agent(config_file: str | None, library: str | None, remove_dra_slices: bool,
               **flags: Any) -> None:
    """Serve the node agent (device plugin, inventory, exporter, watchdog) until stopped."""
    names = {"gpu_backend": "gpuBackend", "device_plugin_dir": "devicePluginDir",
             "pod_resources_socket": "podResourcesSocket", "node_name": "nodeName",
             "state_dir": "stateDir", "metrics_address": "metricsAddress",
             "kubeconfig": "kubeconfig", "log_level": "logLevel"}
    _lazy("gpuslice.node.agent", "run")(
        config_file=config_file, library=library, flags={names[k]: v for k, v in flags.items()},
        remove_slices=remove_dra_slices)
