"""The admission webhook (`gpuslice webhook`) and its certificates (`gpuslice certgen`).

Modules, in the order to read them:
  admit.py       PURE: pod + namespace labels + options -> pass, skip, deny or JSON Patch
  dra.py         PURE: a GPU pod on the DRA path -> its ResourceClaimTemplates and patch
  jsonpointer.py RFC 6901 pointers for the patches
  review.py      AdmissionReview v1 decode/encode (the wire, WIRE.md "Admission webhook")
  config.py      the config file schema (keys in docs/webhook.md) -> admit.Options
  app.py         aiohttp routes: POST /mutate, /healthz, /readyz, /metrics
  namespaces.py  namespace labels for the in-code opt-out check (lightkube, cached)
  dra_cluster.py DRA's view of the API: the published GPUs, the templates, claims' owners
  explain.py     NoGPUFit events on translated pods kube-scheduler finds no room for
  tls.py         serving certificate from files, reloaded when they change
  metrics.py     Prometheus metrics (admission latency, requests by result, certificate)
  command.py     `gpuslice webhook`: config, logging, TLS, run the server
  certs.py       CA + serving certificate: make, check, read and write PEM files
  certgen.py     `gpuslice certgen`: files or a Secret, and the caBundle (lightkube)
"""
