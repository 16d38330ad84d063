"""Kubernetes access for the services (an edge: the pure core never imports this package).

Modules, in the order to open them:
  client.py   make_client(): kubeconfig / $KUBECONFIG / service account -> lightkube AsyncClient
  transport.py  the bytes under that client: aiohttp instead of httpx2's pure-Python pool
  errors.py   the typed API-error tree (Conflict, NotFound, Gone, Forbidden, Invalid, Unavailable)
  patch.py    merge-patch annotations/labels, guarded by resourceVersion; retry_on_conflict
  events.py   EventRecorder: best-effort core/v1 Events, repeats aggregated into `count`
  cache.py    Informer: list + watch into a trimmed store, 410 relists, back-off, no hot loop
  lease.py    LeaderElector: coordination.k8s.io/v1 Lease leader election
The scheduler extender and the node agent build on these; neither talks to lightkube otherwise
for errors (catch kube.errors.*, never lightkube.ApiError or httpx2 errors).
RBAC the package itself uses: see the docstring of each module ("RBAC:" lines).
"""
