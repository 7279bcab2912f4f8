"""Builds the Python client's wheel and sdist and checks that they can be
published (scripts/test.sh runs it with clients/python/.venv's python):

- `uv build --no-build-isolation` with the pinned hatchling of the test extra
  (nothing is downloaded), into a temp dir;
- `twine check --strict` (metadata, the README renders);
- the wheel holds the package, py.typed and nothing else; the sdist holds
  src/, README.md and pyproject.toml, and no tests.

Usage: .venv/bin/python scripts/check_dist.py [UV]   (UV default: ../../.tools/bin/uv)
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
UV = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parents[1] / ".tools" / "bin" / "uv")
MODULES = {"__init__.py", "artifacts.py", "client.py", "errors.py", "events.py", "models.py", "py.typed"}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="execgate-dist-") as out:
        subprocess.run([UV, "build", "-q", "--no-build-isolation", "--python", sys.executable, "--out-dir", out, str(HERE)],
                       check=True)
        dist = sorted(Path(out).iterdir())
        wheels = [p for p in dist if p.suffix == ".whl"]
        sdists = [p for p in dist if p.name.endswith(".tar.gz")]
        assert len(wheels) == 1 and len(sdists) == 1, f"want one wheel and one sdist, got {[p.name for p in dist]}"
        subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheels[0]), str(sdists[0])], check=True)

        names = zipfile.ZipFile(wheels[0]).namelist()
        pkg = {n.split("/", 1)[1] for n in names if n.startswith("execgate/")}
        assert pkg == MODULES, f"the wheel's package: {sorted(pkg)}, want {sorted(MODULES)}"
        other = [n for n in names if not n.startswith(("execgate/", "execgate-"))]
        assert not other, f"the wheel holds more than the package: {other}"

        root = sdists[0].name[: -len(".tar.gz")]
        members = {m.split("/", 1)[1] for m in tarfile.open(sdists[0]).getnames() if "/" in m}
        want = {"src/execgate/" + m for m in MODULES} | {"README.md", "pyproject.toml", "PKG-INFO"}
        assert want <= members, f"the sdist {root} lacks {sorted(want - members)}"
        tests = [m for m in members if m.startswith("tests/")]
        assert not tests, f"the sdist holds tests: {tests}"
        print(f"python client: {wheels[0].name} and {sdists[0].name} built and checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
