# Node-agent image: `gpuslice node-agent` plus libgpuslice.so built for glibc 2.17 (zig), which
# the agent copies into a host directory at start so every managed container can load it.
#   docker build -f deploy/docker/node-agent.Dockerfile -t ghcr.io/gpuslice/node-agent:0.1.0 .
# Bases are pinned to exact releases; pin their digests (`@sha256:...`) when you publish.

# 1. The in-container library: CUDA headers from the CUDA devel image, zig for the old glibc.
FROM nvidia/cuda:13.0.1-devel-ubuntu24.04 AS native
# The base image is pinned; its distribution's make and pip come with it (build stage only).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends make python3-pip \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --break-system-packages ziglang==0.17.0
COPY native /src/native
RUN make -C /src/native ZIG="python3 -m ziglang" CUDA_HOME=/usr/local/cuda

# 2. The Python wheel, without the library (stage 1 made the portable one).
FROM python:3.12.8-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml setup.py constraints.txt README.md LICENSE ./
COPY src ./src
COPY native ./native
RUN pip install --no-cache-dir build==1.2.2 \
 && python -m build --wheel --outdir /dist .

FROM python:3.12.8-slim-bookworm
LABEL org.opencontainers.image.title="gpuslice node agent" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/gpuslice/gpuslice"
COPY constraints.txt /tmp/constraints.txt
COPY --from=wheel /dist /tmp/dist
RUN pip install --no-cache-dir -c /tmp/constraints.txt /tmp/dist/*.whl \
 && rm -rf /tmp/dist /tmp/constraints.txt
COPY --from=native /src/native/build/libgpuslice.so /opt/gpuslice/lib/libgpuslice.so
ENV GPUSLICE_LIBRARY=/opt/gpuslice/lib/libgpuslice.so
# Runs as root on purpose: it serves the kubelet's device-plugin socket, writes hostPath
# directories (library, regions), reads NVML and may kill processes over their limit.
# hadolint ignore=DL3002
USER 0
ENTRYPOINT ["gpuslice", "node-agent"]
