"""Files in, artifacts out, against a real gateway (conftest.py): files= and
stdin= reach the tool, the envelope's artifacts are typed, ``artifact``
fetches one (bounded), ``save_artifacts`` writes them all, safely."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import anyio
import pytest

import execgate
from execgate import Artifact, ArtifactMismatch, AsyncClient, Client, Envelope

# The tool (clients/testdata): report.csv inline, big.bin fetched, dot.png.
TOOL = (Path(__file__).resolve().parents[2] / "testdata" / "artifacts_tool.py").read_text()
BIG = bytes(range(250)) * 400
FILES = [{"path": "data/in.csv", "content": "a,b\n1,2\n"}]


def client(gw, tenant="demo") -> Client:
    return Client(gw.url, token=gw.token(tenant))


@pytest.fixture(scope="module")
def run(gateway) -> Envelope:
    with client(gateway) as c:
        return c.execute(TOOL, files=FILES, stdin="from stdin\n")


def test_files_and_stdin_reach_the_tool_and_artifacts_are_typed(run):
    assert run.result == 2
    assert [a.name for a in run.artifacts] == ["big.bin", "dot.png", "report.csv"]
    big, dot, report = run.artifacts
    assert isinstance(report, Artifact) and report.mime == "text/csv" and report.data == b"2,from stdin\n"
    assert report.sha256 == hashlib.sha256(b"2,from stdin\n").hexdigest() and report.bytes == 13
    assert big.bytes == 100000 and big.base64 is None and big.data is None  # over the inline cap
    assert run.images == [dot] and dot.mime == "image/png" and dot.data == b"\x89PNG\r\n\x1a\n"
    assert run.truncated.artifacts == [] and run.truncated.artifacts_dropped == 0


def test_artifact_fetches_one_bounded(gateway, run):
    with client(gateway) as c:
        assert c.artifact(run.execution_id, "big.bin") == BIG
        with pytest.raises(execgate.ExecgateError) as e:
            c.artifact(run.execution_id, "big.bin", max_bytes=1000)
        assert e.value.error_type == "PayloadTooLarge"
        with pytest.raises(execgate.NotFound):
            c.artifact(run.execution_id, "nope.txt")
        with pytest.raises(ValueError):
            c.artifact(run.execution_id, "../report.csv")
    with client(gateway, "limited") as other, pytest.raises(execgate.NotFound):
        other.artifact(run.execution_id, "report.csv")  # another tenant's: not there


def test_save_artifacts_writes_every_one(gateway, run, tmp_path):
    out = tmp_path / "new" / "dir"
    with client(gateway) as c:
        paths = c.save_artifacts(run, out)
    assert [p.name for p in paths] == ["big.bin", "dot.png", "report.csv"]
    assert (out / "big.bin").read_bytes() == BIG  # fetched
    assert (out / "report.csv").read_bytes() == b"2,from stdin\n"  # inline
    assert sorted(os.listdir(out)) == ["big.bin", "dot.png", "report.csv"]  # no temporary file left


def test_save_artifacts_never_writes_through_a_link(gateway, run, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.csv").symlink_to(secret)
    (out / "big.bin").write_text("an older big.bin")
    with client(gateway) as c, pytest.raises(FileExistsError, match="report.csv is there already, a symbolic link: left alone"):
        c.save_artifacts(run, out)
    assert secret.read_text() == "keep" and (out / "report.csv").is_symlink()
    assert (out / "big.bin").read_bytes() == BIG  # a regular file is replaced whole


def test_save_artifacts_refuses_unsafe_names_before_writing_anything(gateway, tmp_path):
    def env(*names):
        arts = [{"name": n, "bytes": 1, "mime": "text/plain", "sha256": hashlib.sha256(b"x").hexdigest(), "base64": "eA=="} for n in names]
        return Envelope.from_dict({"execution_id": "x1", "status": "ok", "artifacts": arts})

    with client(gateway) as c:
        for bad in ["../escape", "a/b", "..", "back\\slash", "bell\x07", ""]:
            with pytest.raises(ValueError):
                c.save_artifacts(env("ok.txt", bad), tmp_path / "out")
            assert not (tmp_path / "out" / "ok.txt").exists()
        # Bytes that are not the listed ones are refused, and nothing is left.
        lying = Envelope.from_dict({"execution_id": "x1", "status": "ok",
                                    "artifacts": [{"name": "a.txt", "bytes": 1, "mime": "text/plain", "sha256": "0" * 64, "base64": "eA=="}]})
        with pytest.raises(ArtifactMismatch):
            c.save_artifacts(lying, tmp_path / "out")
        assert os.listdir(tmp_path / "out") == []
    assert not (tmp_path / "escape").exists()


@pytest.mark.anyio
async def test_the_async_client_fetches_and_saves_alike(gateway, run, tmp_path):
    async with AsyncClient(gateway.url, token=gateway.token()) as c:
        assert await c.artifact(run.execution_id, "big.bin") == BIG
        paths = await c.save_artifacts(run, tmp_path)
    assert [p.name for p in paths] == ["big.bin", "dot.png", "report.csv"]
    assert await anyio.Path(tmp_path / "big.bin").read_bytes() == BIG
