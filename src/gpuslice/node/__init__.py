"""The node agent (`gpuslice node-agent`): the node half of a slice. What a container is handed
(layout, env and mounts, regions, limits) lives below this package and dra/, in container/;
only agent.py (which runs both paths) and settings.py (the DRA driver name) import dra/.

Open first: agent.py (how the parts are put together), then
  nvml.py       GPUBackend Protocol: NVML and the fake backend
  health.py     which GPUs are healthy (XIDs, GPUs that stop answering)
  plugin.py     kubelet device plugin servicer (one per device resource)
  kubelet.py    serve the plugin sockets, register, re-register after a kubelet restart
  allocate.py   PURE: in-flight pods + an Allocate call -> the container's env and mounts
  cluster.py    the agent's view of the API: pods on this node, patches queued while it is away
  inventory.py  the node's gpuslice.io/inventory annotation and the per-node config
  verify.py     PodResources check after containers start (swap interchangeable pods)
  swap.py       the swap itself, journalled so a half-done one completes next round
  exporter.py   /metrics: per container, per GPU, slots
  watchdog.py   processes over their limit or without the library
  proto/        device plugin v1beta1 and PodResources v1 (generated code checked in)
"""
