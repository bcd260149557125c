# One image for both commands: `gfd` (GPU feature discovery) and `nfd-lite` (the node label writer).
# Runs as uid 65532 with a read-only root filesystem: nothing is written at run time except the feature
# file into the mounted /etc/kubernetes/node-feature-discovery.
#
#   docker build -t gpu-labeller .                        (or scripts/build-image.sh, with buildah)
#   docker build --build-arg BASE_IMAGE=python:3.13-slim .
#
# BASE_IMAGE needs python3 with the venv module; the build and the runtime stage use the same one, so
# the virtual environment's interpreter link stays valid.
ARG BASE_IMAGE=python:3.12-slim
# checkov:skip=CKV_DOCKER_7:FROM uses the BASE_IMAGE build argument, whose default above carries a version tag

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/gpu-labeller
# .dockerignore admits only the package sources, so this layer changes only when they do.
COPY . /src
# A regular (not editable) install, byte-compiled now because the runtime root filesystem is read-only;
# pip and setuptools are removed afterwards: nothing installs packages at run time. The Kubernetes
# client's asyncio twin (kubernetes.aio, about 70 MB) is unused and dropped.
# Behind a TLS-inspecting proxy, pass its CA bundle as a build secret (never stored in a layer):
#   --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt
RUN --mount=type=secret,id=pip-ca,required=false \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && /opt/gpu-labeller/bin/pip install /src \
 && rm -rf /opt/gpu-labeller/lib/python3*/site-packages/kubernetes/aio \
 && /opt/gpu-labeller/bin/python -m compileall -q /opt/gpu-labeller \
 && /opt/gpu-labeller/bin/pip uninstall -y -q pip setuptools \
 && mkdir -p /out/share \
 && cp -r /src/profiles /out/share/profiles \
 && printf 'nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin\n' >/out/passwd \
 && printf 'nonroot:x:65532:\n' >/out/group

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="gpu-labeller" \
      org.opencontainers.image.description="GPU feature discovery (gfd) and a least-privilege node label writer (nfd-lite) for Kubernetes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/gpu-labeller/gpu-labeller" \
      org.opencontainers.image.url="https://github.com/gpu-labeller/gpu-labeller"
COPY --from=build /opt/gpu-labeller /opt/gpu-labeller
# Mock machine profiles, for labelling GPU-less test clusters (gfd --backend mock --mock-profile ...).
COPY --from=build /out/share /usr/share/gpu-labeller
# A named user for uid 65532 (tools that look the uid up); appended, the base's own entries stay.
COPY --from=build /out/passwd /out/group /tmp/nonroot/
RUN cat /tmp/nonroot/passwd >>/etc/passwd && cat /tmp/nonroot/group >>/etc/group && rm -rf /tmp/nonroot
ENV PATH=/opt/gpu-labeller/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /
# Kubernetes ignores image health checks; the chart's probes use the metrics and /healthz endpoints.
HEALTHCHECK NONE
CMD ["gfd", "--help"]
