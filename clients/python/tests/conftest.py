"""Starts a real `bin/execgate serve` for the suite: a temp state dir, the
config clients/testdata/execgate.yaml (tenants demo, limited, broke; packages
from clients/testdata/wheels; tenant demo's MCP tool server "self" is the
gateway's own /mcp), the real nsjail sandbox. Tokens are minted with
`execgate token`.

Environment: EXECGATE_BIN (default bin/execgate), EXECGATE_TEST_RUNTIMES
(default .tools/cache/clients-runtimes: the runtime python3.11,
built by the first serve). Without the
binary the suite is skipped, except under CI=true, where it fails.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
# Tenant demo's brokered secret DEMO_KEY (clients/testdata/execgate.yaml).
DEMO_SECRET = "clients-demo-secret-3f9a"


class Gateway:
    def __init__(self, url: str, config: Path, state: Path, binary: Path) -> None:
        self.url = url
        self.config = config
        self.state = state
        self.binary = binary
        self._tokens: dict[tuple, str] = {}

    def token(self, tenant: str = "demo", *roles: str) -> str:
        key = (tenant,) + roles
        if key not in self._tokens:
            cmd = [str(self.binary), "token", "--config", str(self.config), "--tenant", tenant]
            for r in roles or ("executor",):
                cmd += ["--role", r]
            self._tokens[key] = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
        return self._tokens[key]

    def audit(self) -> list[dict]:
        p = self.state / "audit.jsonl"
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def _spend_budget(g: Gateway, tenant: str) -> None:
    """Burns tenant's daily CPU budget: each run gets what is left of it,
    until nothing is and runs are 429 BudgetExhausted."""
    burn = {"source": "def run(args, context):\n    while True:\n        pass\n", "limits": {"timeout_ms": 30000}}
    for _ in range(8):
        r = httpx.post(g.url + "/v1/execute", json=burn, headers={"Authorization": "Bearer " + g.token(tenant)}, timeout=60)
        if r.status_code == 429:
            return
    pytest.fail(f"{tenant}'s CPU budget is not spent after 8 runs: {r.status_code} {r.text[:400]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def gateway():
    binary = Path(os.environ.get("EXECGATE_BIN", REPO / "bin" / "execgate"))
    if not binary.exists():
        msg = f"{binary} is missing (go build -o bin/execgate ./cmd/execgate)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    runtimes = Path(os.environ.get("EXECGATE_TEST_RUNTIMES", REPO / ".tools" / "cache" / "clients-runtimes"))
    state = Path(tempfile.mkdtemp(prefix="execgate-pyclient-"))
    os.chmod(state, 0o711)  # the jail user reaches the run dirs below it
    key = state / "dev.key"
    key.write_text(secrets.token_hex(32))
    key.chmod(0o600)
    port = _free_port()
    testdata = REPO / "clients" / "testdata"
    text = (testdata / "execgate.yaml").read_text()
    for k, v in {"PORT": port, "STATE": state, "RUNTIMES": runtimes, "TESTDATA": testdata}.items():
        text = text.replace("{{" + k + "}}", str(v))
    config = state / "execgate.yaml"
    config.write_text(text)
    # The header of tenant demo's tool server "self" (the gateway's own /mcp),
    # read when serve starts.
    self_token = subprocess.run([str(binary), "token", "--config", str(config), "--tenant", "demo", "--role", "executor"],
                                check=True, capture_output=True, text=True).stdout.strip()
    tok = state / "self-mcp.token"
    tok.touch(mode=0o600)
    tok.write_text("Bearer " + self_token)
    env = dict(os.environ, PATH=f"{REPO / '.tools' / 'bin'}:{os.environ.get('PATH', '')}", TOOL_SECRET_CLIENTS_DEMO=DEMO_SECRET)
    log = open(state / "serve.log", "wb")
    proc = subprocess.Popen([str(binary), "serve", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # the first start builds the rootfs
        while True:
            if proc.poll() is not None:
                pytest.fail(f"execgate serve exited {proc.returncode}:\n{(state / 'serve.log').read_text()[-4000:]}")
            try:
                if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"execgate serve not ready after 300 s:\n{(state / 'serve.log').read_text()[-4000:]}")
            time.sleep(0.2)
        g = Gateway(url, config, state, binary)
        _spend_budget(g, "broke")
        yield g
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def anyio_backend():
    return "asyncio"
