"""A kubelet for the node agent's tests (import as `kubelet.*`; tests/ is on sys.path).

  emulator.py     registration server, device plugin client (ListAndWatch, admission) and
                  the PodResources v1 server, over real unix sockets
  pods.py         pods as the webhook and the extender leave them (bound, with assignments)
  nodeharness.py  a running node agent with fake GPUs registered with the emulator
  dra.py          the DRA side: plugin watcher of plugins_registry (GetInfo,
                  NotifyRegistrationStatus) and the DRAPlugin client (prepare, unprepare)
"""
