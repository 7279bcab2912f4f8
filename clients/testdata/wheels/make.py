"""Writes the wheels the client suites prepare environments from
(clients/testdata/execgate.yaml: sandbox.package_index.find_links, no index):

    egprobe 1.0   allowed to every test tenant; `import egprobe; egprobe.VERSION`
    egdenied 1.0  on no tenant's allow-list (the PolicyDenied path)

Pure Python, py3-none-any, byte-for-byte reproducible (fixed timestamps), so
their hashes, and the environment ids, never change. Run it with
/usr/bin/python3 clients/testdata/wheels/make.py after changing it; the
wheels are committed beside it.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEELS = {"egprobe": "1.0", "egdenied": "1.0"}


def write(name: str, version: str) -> Path:
    dist = f"{name}-{version}"
    files = {
        f"{name}/__init__.py": f'VERSION = "{version}"\n',
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: execgate-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(text.encode())}\n"
    files[f"{dist}.dist-info/RECORD"] = record + f"{dist}.dist-info/RECORD,,\n"
    out = HERE / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in files.items():
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, text)
    return out


if __name__ == "__main__":
    for n, v in WHEELS.items():
        print(write(n, v))
