#!/usr/bin/env bash
# Level jail beside snekbox (python-discord/snekbox) on the same nsjail, in
# one run: `execgate bench --sections snekbox` (cmd/execgate/internal/bench/
# snekbox.go) with scripts/snekbox-driver.py driving snekbox in-process.
#
#   scripts/bench-snekbox.sh [STATE_DIR] [-- more execgate bench flags]
#
# snekbox is not on PyPI: its source is a git checkout of the pinned commit
# below, cloned from SNEKBOX_GIT (a local mirror or https://github.com/
# python-discord/snekbox), installed with uv (.tools/bin/uv) into a venv
# under STATE_DIR/snekbox with its own pinned requirements as constraints,
# on /usr/bin/python3. Needs root (nsjail, cgroups, snekbox's tmpfs homes),
# as `execgate bench` does. EXECGATE (default: build ./cmd/execgate to
# STATE_DIR/execgate) is the binary measured; RUNTIME (default python3.11,
# Debian 12's, the version of snekbox's /usr/bin/python3) its runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
SNEKBOX_COMMIT=610083369354da6714c368bc3ae446cef4a29baf # 2026-06-28, "Bump deps (#259)"
SNEKBOX_GIT=${SNEKBOX_GIT:-https://github.com/python-discord/snekbox}
STATE=${1:-/tmp/execgate-bench-snekbox}
[[ $# -gt 0 ]] && shift
[[ ${1:-} == -- ]] && shift
PY=/usr/bin/python3
NSJAIL=${EXECGATE_NSJAIL:-$PWD/.tools/bin/nsjail}
UV=$PWD/.tools/bin/uv
S=$STATE/snekbox
mkdir -p "$S"
if [[ $(git -C "$S/src" rev-parse HEAD 2>/dev/null) != "$SNEKBOX_COMMIT" ]]; then
  rm -rf "$S/src" "$S/venv"
  git clone -q "$SNEKBOX_GIT" "$S/src"
  git -C "$S/src" checkout -q "$SNEKBOX_COMMIT"
fi
[[ -x $S/venv/bin/python ]] || "$UV" venv -q --python "$PY" "$S/venv"
# As snekbox deploys itself (its requirements.pip: the gunicorn and sentry
# extras, which its package imports) with those pins as constraints.
# snekbox's version comes from git (setuptools-git-versioning): the
# checkout has its history.
"$UV" pip install -q --python "$S/venv/bin/python" -c "$S/src/requirements/requirements.pip" "$S/src[gunicorn,sentry]"
EXECGATE=${EXECGATE:-}
if [[ -z $EXECGATE ]]; then
  EXECGATE=$STATE/execgate
  go build -trimpath -o "$EXECGATE" ./cmd/execgate
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
EXECGATE_NSJAIL=$NSJAIL "$EXECGATE" bench --state-dir "$STATE/state" --sections snekbox --runtimes "${RUNTIME:-python3.11}" \
  --snekbox "$S/venv/bin/python $PWD/scripts/snekbox-driver.py --src $S/src --nsjail $NSJAIL --python $PY --state $S/run" "$@"
