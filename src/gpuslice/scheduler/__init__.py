"""The scheduler extender (`gpuslice scheduler`): kube-scheduler's filter/prioritize/bind/preempt.

Modules, in the order to read them:
  wire.py        the extender's JSON bodies (capitalised Go field names, WIRE.md)
  state.py       ExtenderState: the cluster rebuilt from annotations + in-flight pods; trimmers
  filter.py      Evaluator (a pod against nodes, in-flight rule) and the filter reply
  prioritize.py  scores 0..10 by policy
  bind.py        choose GPUs, write the assignment, create the Binding (retries, rollback)
  preempt.py     which preemption candidates' victims really free enough GPU
  config.py      the service's config schema (config.load, prefix GPUSLICE_SCHEDULER)
  follow.py      lead together with this pod's kube-scheduler (follow its Lease)
  metrics.py     Prometheus metrics (latency per verb, placed/refused, leader, per-GPU use)
  app.py         HTTP routes only;  service.py  informers, election, sweeper, the runner
Tests: tests/unit/scheduler/, tests/integration/scheduler/
"""
