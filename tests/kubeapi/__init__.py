"""A Kubernetes API server for tests, the fixtures that pick it or a real one, and a
kube-scheduler stand-in. Not shipped: tests and benchmarks import it as `kubeapi` (tests/ is
on sys.path under pytest; benchmarks add it).
Open first: fixtures.py (what a test gets), then server.py.
  server.py           KubeApiServer: the server on its own thread (HTTP + HTTPS); spawn()
  app.py              HTTP paths and verbs;  watch.py  watch streams
  store.py            objects, resourceVersions, history, watchers
  shapes.py           JSON types (400);  objects.py  per-kind defaults, validation (422)
  quantity.py         quantities as the real server stores them ("3000" -> "3k")
  microtime.py        MicroTime as the real server reads it (six digits, UTC)
  patches.py          merge, strategic, JSON patch;  selectors.py  label/field selectors
  admission.py        calls admission webhooks;  errors.py  Status bodies;  tables.py  kubectl
  resources.py        the served types + discovery;  faults.py  fault injection
  certs.py            CA, certificates, kubeconfig;  envtest.py  real kube-apiserver + etcd
  protobuf.py         kubectl's protobuf bodies (namespace, configmap, secret)
  raw.py              raw HTTP helpers for tests;  __main__.py  `python -m kubeapi`
  bench.py            the server's CPU per pod (docs/benchmarks.md)
  scheduler_driver.py plays kube-scheduler against an extender; its parts:
                      scheduler_queue.py, scheduler_filters.py, scheduler_extender.py
  dra_allocator.py    plays kube-scheduler's DRA allocation (consumable capacity, shareID)
  dra_validation.py   kube-apiserver's ResourceSlice capacity rules (422)
  dra_gates.py        a server with DRAConsumableCapacity off;  dra_samples.py  the v1.36 samples
Tests: tests/integration/kubeapi/"""

from .faults import DUPLICATE_EVENTS, REORDERED_EVENTS, Faults
from .server import KubeApiServer

__all__ = ["DUPLICATE_EVENTS", "REORDERED_EVENTS", "Faults", "KubeApiServer"]
