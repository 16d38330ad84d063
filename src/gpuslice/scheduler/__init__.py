"""The scheduler extender (`gpuslice scheduler`): kube-scheduler's filter/prioritize/bind verbs.

Modules, in the order to read them:
  wire.py        the extender's JSON bodies (capitalised Go field names, WIRE.md)
  state.py       ExtenderState: the cluster rebuilt from annotations + in-flight pods; trimmers
  filter.py      Evaluator (a pod against nodes, in-flight rule) and the filter reply
  prioritize.py  scores 0..10 by policy
  bind.py        choose GPUs, write the assignment, create the Binding (retries, rollback)
  config.py      the service's config schema (config.load, prefix GPUSLICE_SCHEDULER)
  metrics.py     Prometheus metrics (latency per verb, placed/refused, per-GPU allocation)
  app.py         HTTP routes only;  service.py  informers, lease, sweeper, the aiohttp runner
Tests: tests/unit/scheduler/, tests/integration/scheduler/
"""
