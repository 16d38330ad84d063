"""Where the services get their Kubernetes API client: one lightkube AsyncClient per process.

Owns: finding the API configuration, in this order:
  1. the kubeconfig file given (`--kubeconfig`, a service's `kubeconfig` setting);
  2. $KUBECONFIG (the first existing file when it lists several, joined by ':');
  3. the pod's service account (in-cluster: KUBERNETES_SERVICE_HOST + the mounted token);
  4. ~/.kube/config (a developer running a service by hand).
Also: `dict_view(Pod)`, the same resource decoded as plain dicts (as the API sends them):
the rest of kube/ hands callers Mappings, which the pure core (handoff.py) reads.
Does not: retry or translate call errors (errors.py does), or cache objects (cache.py).
On failure: EnvironmentProblem naming every place looked at and how to fix it, never
lightkube's bare ConfigError (the CLI exits 3 with it).
Tests: tests/unit/kube/test_client_config.py
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import AsyncClient, ConfigError, KubeConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.core import resource as lkr
from lightkube.generic_resource import Generic

from gpuslice.errors import EnvironmentProblem
from gpuslice.kube.transport import AiohttpTransport

__all__ = ["FIELD_MANAGER", "dict_view", "load_config", "make_client"]

FIELD_MANAGER = "gpuslice"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
HOME_KUBECONFIG = "~/.kube/config"


def _from_kubeconfig_env(value: str) -> str | None:
    paths = [p for p in value.split(os.pathsep) if p]
    return next((p for p in paths if Path(p).expanduser().is_file()), None)


def load_config(kubeconfig: str | None = None, *, context: str | None = None,
                service_account: str = SERVICE_ACCOUNT) -> KubeConfig:
    """The API configuration to use (see the module docstring for the order)."""
    tried: list[str] = []
    try:
        if kubeconfig:
            if not Path(kubeconfig).expanduser().is_file():
                raise EnvironmentProblem(
                    f"kubeconfig {kubeconfig}: no such file; pass the path of a kubeconfig "
                    "file, or leave --kubeconfig out to use $KUBECONFIG or the service account")
            return _checked(KubeConfig.from_file(kubeconfig), kubeconfig, context)
        env = os.environ.get("KUBECONFIG", "")
        if env:
            found = _from_kubeconfig_env(env)
            if found:
                return _checked(KubeConfig.from_file(found), found, context)
            tried.append(f"$KUBECONFIG={env} (no such file)")
        account = Path(service_account)
        if os.environ.get("KUBERNETES_SERVICE_HOST") and (account / "token").is_file():
            return KubeConfig.from_service_account(service_account)
        tried.append(f"no service account (KUBERNETES_SERVICE_HOST unset or no {account}/token)")
        home = Path(HOME_KUBECONFIG).expanduser()
        if home.is_file():
            return _checked(KubeConfig.from_file(home), str(home), context)
        tried.append(f"no {HOME_KUBECONFIG}")
    except (ConfigError, yaml.YAMLError, OSError, ValueError, KeyError, TypeError,
            AttributeError) as exc:  # lightkube raises all of these for a malformed file
        raise EnvironmentProblem(
            f"cannot load the Kubernetes API configuration: {exc}; check the kubeconfig "
            "file (kubectl --kubeconfig FILE version) or pass another with --kubeconfig") from exc
    raise EnvironmentProblem(
        f"no Kubernetes API configuration found: {'; '.join(tried)}; pass --kubeconfig or "
        "run in a pod with a service account")


def _checked(config: KubeConfig, source: str, context: str | None) -> KubeConfig:
    """Resolve the context now, so a wrong name fails here with the names that exist."""
    try:
        config.get(context)
    except ConfigError as exc:
        names = ", ".join(sorted(config.contexts)) or "none"
        raise EnvironmentProblem(
            f"kubeconfig {source}: {exc} (contexts: {names}); pass --context NAME or set "
            "current-context in the file") from exc
    return config


def make_client(kubeconfig: str | None = None, *, context: str | None = None,
                timeout_s: float = 10, field_manager: str = FIELD_MANAGER,
                service_account: str = SERVICE_ACCOUNT) -> AsyncClient:
    """An AsyncClient for the configuration found, sending through aiohttp (transport.py);
    every request times out after `timeout_s` (watches excepted: lightkube lifts the read
    timeout for them)."""
    config = load_config(kubeconfig, context=context, service_account=service_account)
    try:
        single = config.get(context)
        assert single.user is not None, "the kubeconfig context has no user"
        tls = verify_cluster(single.cluster, single.user, single.abs_file)
        return AsyncClient(single, timeout=httpx2.Timeout(timeout_s),
                           field_manager=field_manager, transport=AiohttpTransport(tls))
    except (ConfigError, OSError, ValueError, AssertionError) as exc:
        # e.g. a CA file that does not exist, a user entry without credentials
        raise EnvironmentProblem(
            f"cannot use the Kubernetes API configuration: {exc}; check the kubeconfig's "
            "cluster and user entries (kubectl config view)") from exc


@functools.cache
def dict_view(resource: type[Any]) -> type[Any]:
    """A twin of lightkube resource class `resource` (same API path and verbs) whose objects
    decode to dicts, skipping lightkube's typed models: cheaper, and what our code reads.
    Not put in lightkube's resource registry, so it never shadows the typed class."""
    if issubclass(resource, lkr.NamespacedResource):
        base: type = lkr.NamespacedResourceG
    elif issubclass(resource, lkr.GlobalResource):
        base = lkr.GlobalResource
    else:
        raise TypeError(f"{resource!r} is not a lightkube resource class")
    info = lkr.api_info(resource)
    meta = type_meta(resource)

    def __init__(self: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        dict.__init__(self, *args, **kwargs)
        # kube-apiserver sends the items of a list without apiVersion and kind (a watch
        # event's object has them); events and anything else that names the object need them
        if "kind" not in self:
            self.update(meta)

    return type(resource.__name__, (base, Generic), {"_api_info": info, "__init__": __init__})


def type_meta(resource: type[Any]) -> dict[str, str]:
    """apiVersion and kind of lightkube resource class `resource`'s objects."""
    info = lkr.api_info(resource).resource
    return {"apiVersion": f"{info.group}/{info.version}" if info.group else info.version,
            "kind": info.kind}
