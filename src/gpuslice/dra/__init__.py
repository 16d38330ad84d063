"""The DRA driver (`resource.k8s.io/v1`): kube-scheduler allocates shares of a GPU, gpuslice
enforces them. One driver name for the slices, the DeviceClass, the kubelet plugin and CDI.

Open first: slices.py (what a node publishes), then
  slices.py     PURE: the node's GPUs (its inventory: hidden left out, memory scaled, health)
                -> its ResourceSlice
  publisher.py  create/update the slice, read it back (a gate-off server drops sharing
                fields silently: say so loudly), remove it at uninstall
  claims.py     PURE: a claim's allocation -> its shares on this node (the kubelet plugin's input)
  fit.py        PURE: why a request fits no node's published GPUs (the webhook's NoGPUFit events)
  plugin.py     kubelet DRAPlugin servicer: prepare = claim -> region + CDI spec + checkpoint
  cdi.py        the claim's CDI spec (the device plugin's env and mounts, plus device nodes)
  checkpoint.py <state-dir>/dra/prepared.json: what prepare made, read back after a restart
  kubelet.py    the DRA and plugin-registration sockets, served again when they disappear
  proto/        kubelet DRA v1 and plugin registration (generated code checked in)
The node agent runs all of it when `dra.enabled` (node/agent.py).
The contract between the two halves: docs/dra.md and the DRA section of WIRE.md.
"""

DRIVER = "gpu.gpuslice.io"
"""The driver name: ResourceSlice spec.driver, allocation results' driver, the DeviceClass."""
