"""Writing a run's artifacts into a directory, safely (``save_artifacts``).

The gateway collects only plain file names, but the client does not rely on
it: a name with a slash, a backslash, a control character, "." or ".." is
refused before anything is written. The directory is opened once and every
file is created beneath that descriptor: written to a new temporary name
(O_CREAT|O_EXCL|O_NOFOLLOW) and renamed over the artifact's name, so a
regular file of that name is replaced whole, and a symbolic link (or a
directory, or anything but a regular file) already there is left alone
(``FileExistsError``): nothing is ever written through a link. The bytes
written are checked against the artifact's declared size (no more is
read) and its sha256 before the rename.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from pathlib import Path
from typing import Optional, Sequence, Union

from .errors import ExecgateError
from .models import Artifact

# The most bytes ``artifact()`` reads by default: the platform's maximum of
# limits.artifacts_bytes (64 MiB).
DEFAULT_MAX_BYTES = 64 << 20
MAX_NAME_BYTES = 255


def check_name(name: str) -> None:
    """Raise ValueError unless name is a plain file name (the rules of the
    gateway's artifact names)."""
    if not isinstance(name, str) or name in ("", ".", ".."):
        raise ValueError(f"artifact name {name!r} is not a file name")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise ValueError(f"artifact name {name[:40]!r}… is over {MAX_NAME_BYTES} bytes")
    for ch in name:
        o = ord(ch)
        if ch in "/\\" or o < 0x20 or 0x7F <= o < 0xA0:
            raise ValueError(f"artifact name {name!r} contains {ch!r}: not a plain file name")


class ArtifactMismatch(ExecgateError):
    """The bytes received for an artifact are not the ones its listing
    declares (size or sha256): nothing is written."""

    error_type = "ArtifactMismatch"


class ArtifactDir:
    """A directory the artifacts of an envelope are written into, made if
    missing and opened once (``with ArtifactDir(path, artifacts) as d``),
    after every artifact's name is checked (ValueError: nothing written)."""

    def __init__(self, path: Union[str, os.PathLike[str]], artifacts: Sequence[Artifact] = ()) -> None:
        for a in artifacts:
            check_name(a.name)
        self.path = Path(path)
        os.makedirs(self.path, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> "ArtifactDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def begin(self, art: Artifact) -> "PendingFile":
        """Start writing art (its name checked, nothing there but a regular
        file); write its bytes, then ``commit``."""
        return PendingFile(self, art)


class PendingFile:
    """One artifact being written to a temporary name in its directory."""

    def __init__(self, d: ArtifactDir, art: Artifact) -> None:
        check_name(art.name)
        self.dir, self.art = d, art
        try:
            st = os.stat(art.name, dir_fd=d.fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
                raise FileExistsError(f"{d.path / art.name} is there already, {what}: left alone")
        self.tmp = ".execgate-" + secrets.token_hex(8) + ".tmp"
        self.fd: Optional[int] = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=d.fd)
        self.sha = hashlib.sha256()
        self.n = 0

    def __enter__(self) -> "PendingFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()

    def write_inline(self) -> bool:
        """Write the envelope's bytes of the artifact; False when it has
        none (the caller fetches them)."""
        if self.art.base64 is None:
            return False
        self.write(self.art.data or b"")
        return True

    def write(self, chunk: bytes) -> None:
        self.n += len(chunk)
        if self.n > self.art.bytes:
            raise ArtifactMismatch(f"artifact {self.art.name!r}: more than the {self.art.bytes} bytes listed")
        self.sha.update(chunk)
        view = memoryview(chunk)
        while view:
            assert self.fd is not None
            view = view[os.write(self.fd, view):]

    def commit(self) -> Path:
        if self.n != self.art.bytes or (self.art.sha256 and self.sha.hexdigest() != self.art.sha256):
            raise ArtifactMismatch(f"artifact {self.art.name!r}: {self.n} bytes with sha256 {self.sha.hexdigest()}, "
                                   f"listed {self.art.bytes} with {self.art.sha256}")
        assert self.fd is not None
        os.close(self.fd)
        self.fd = None
        os.replace(self.tmp, self.art.name, src_dir_fd=self.dir.fd, dst_dir_fd=self.dir.fd)
        self.tmp = ""
        return self.dir.path / self.art.name

    def abort(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.tmp:
            try:
                os.unlink(self.tmp, dir_fd=self.dir.fd)
            except FileNotFoundError:
                pass
            self.tmp = ""
