# Control-plane image: the scheduler extender (`gpuslice scheduler`), the admission webhook
# (`gpuslice webhook`) and `gpuslice certgen`. Pure Python: the wheel is built without the
# in-container library (no CUDA headers in this stage; setup.py skips it with one line).
#   docker build -f deploy/docker/controlplane.Dockerfile -t ghcr.io/gpuslice/controlplane:0.1.0 .
# Bases are pinned to exact releases; pin their digests (`@sha256:...`) when you publish.

FROM python:3.12.8-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml setup.py constraints.txt README.md LICENSE ./
COPY src ./src
COPY native ./native
RUN pip install --no-cache-dir build==1.2.2 \
 && python -m build --wheel --outdir /dist .

FROM python:3.12.8-slim-bookworm
LABEL org.opencontainers.image.title="gpuslice control plane" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/gpuslice/gpuslice"
COPY constraints.txt /tmp/constraints.txt
COPY --from=wheel /dist /tmp/dist
RUN pip install --no-cache-dir -c /tmp/constraints.txt /tmp/dist/*.whl \
 && rm -rf /tmp/dist /tmp/constraints.txt
# Nothing here needs privileges: a fixed non-root uid (the chart sets runAsNonRoot too).
USER 65532:65532
ENTRYPOINT ["gpuslice"]
CMD ["--help"]
