"""Inputs named by URL: ``s3://``, ``gs://``, ``az://``, ``https://``, ``memory://``, ``file://``, any fsspec protocol.

One rule for every input kind: where a reader turns its argument into a path it calls `as_path`, which
keeps a local path a `pathlib.Path` and makes a URL a `RemotePath` — the part of the `pathlib.Path`
interface the readers use (``name``, ``suffix``, ``parent``, ``/``, ``exists``, ``is_file``, ``is_dir``,
``iterdir``, ``glob``, ``stat().st_size``, ``open``, ``read_text``, ``read_bytes``) answered by the URL's
fsspec filesystem. So the run-discovery rule (`vlm_perf.run.discover`), the metadata expansion
(`vlm_perf.ingest.metadata_io.expand_paths`) and every reader run unchanged over a bucket: files are
streamed (``open``), never copied, except where the file format needs a local file (an Nsight ``.sqlite``
trace: `local_copy`).

A `RemotePath` holds only its URL (and what a listing said about it), so it pickles: a Dask worker that
receives one opens the URL itself (the worker needs the protocol's package and credentials, as the client
does). A protocol whose package is missing is one `ConfigError` line naming the extra to install.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tempfile
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, cast

from .errors import ConfigError
from .extras import install_hint

__all__ = ["RemotePath", "as_path", "is_url", "filesystem", "local_copy", "PROTOCOL_PACKAGES"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+)://")
#: protocol -> (package fsspec needs, vlm-perf extra that installs it)
PROTOCOL_PACKAGES = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
                     "az": ("adlfs", "azure"), "abfs": ("adlfs", "azure"), "abfss": ("adlfs", "azure"),
                     "http": ("aiohttp", "http"), "https": ("aiohttp", "http")}


def is_url(text: object) -> bool:
    """``scheme://...`` with a scheme of two or more characters (``C://`` stays a Windows path)."""
    return isinstance(text, RemotePath) or (isinstance(text, str) and _URL.match(text) is not None)


def _protocol(url: str) -> str:
    m = _URL.match(url)
    return m.group(1).lower() if m else ""


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) of ``url``; a `ConfigError` line when the protocol cannot be used."""
    proto = _protocol(url)
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec comes with the dask extra
        raise ConfigError(f"{url}: reading URLs needs fsspec: {install_hint('remote')}") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError:
        package, extra = PROTOCOL_PACKAGES.get(proto, (None, None))
        if package and extra:
            raise ConfigError(f"{url}: reading {proto}:// URLs needs {package}: {install_hint(extra)}") \
                from None
        raise ConfigError(f"{url}: the package fsspec needs for {proto}:// is not installed") from None
    except ValueError as exc:
        raise ConfigError(f"{url}: unknown URL protocol {proto!r} ({str(exc).splitlines()[0]})") from None


class _Stat:
    def __init__(self, size: int) -> None:
        self.st_size = size
        self.st_mtime = 0.0


class RemotePath:
    """A file or folder named by URL, with the `pathlib.Path` methods the readers use (see the module)."""

    __slots__ = ("url", "_kind", "_size")

    def __init__(self, url: str, kind: str | None = None, size: int | None = None) -> None:
        url = str(url)
        root = _URL.match(url)
        if root is None:
            raise ValueError(f"not a URL: {url!r}")
        while url.endswith("/") and len(url) > root.end():
            url = url[:-1]
        self.url = url
        self._kind = kind  # "file" | "directory" | "missing" | None (not asked yet)
        self._size = size

    # ------------------------------------------------------------------------ names
    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemotePath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __lt__(self, other: "RemotePath") -> bool:
        return self.url < str(other)

    def __getstate__(self) -> tuple:
        return (self.url, self._kind, self._size)

    def __setstate__(self, state: tuple) -> None:
        self.url, self._kind, self._size = state

    @property
    def _rest(self) -> str:
        return self.url[_URL.match(self.url).end():]  # type: ignore[union-attr]

    @property
    def name(self) -> str:
        rest = self._rest
        return rest.rsplit("/", 1)[-1] if "/" in rest else rest

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def suffixes(self) -> list[str]:
        return PurePosixPath(self.name).suffixes

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(p for p in self._rest.split("/") if p)

    @property
    def parent(self) -> "RemotePath":
        head = self.url[: len(self.url) - len(self._rest)]
        rest = self._rest
        return RemotePath(head + rest.rsplit("/", 1)[0]) if "/" in rest.strip("/") else RemotePath(head + rest)

    def __truediv__(self, other: str | os.PathLike) -> "RemotePath":
        return RemotePath(self.url + "/" + str(other).strip("/"))

    def joinpath(self, *others: str) -> "RemotePath":
        out = self
        for o in others:
            out = out / o
        return out

    def with_name(self, name: str) -> "RemotePath":
        return self.parent / name

    def with_suffix(self, suffix: str) -> "RemotePath":
        return self.with_name(self.stem + suffix)

    def resolve(self) -> "RemotePath":
        return self

    absolute = expanduser = resolve

    def is_absolute(self) -> bool:
        return True

    def is_symlink(self) -> bool:
        return False

    def is_relative_to(self, other: "RemotePath | str") -> bool:
        return self.url.startswith(str(other).rstrip("/") + "/")

    def relative_to(self, other: "RemotePath | str") -> PurePosixPath:
        base = str(other).rstrip("/") + "/"
        if not self.url.startswith(base):
            raise ValueError(f"{self.url} is not inside {other}")
        return PurePosixPath(self.url[len(base):])

    # ------------------------------------------------------------------------ the store
    def _fs(self) -> tuple[Any, str]:
        return filesystem(self.url)

    def _info(self) -> str:
        if self._kind is None:
            fs, path = self._fs()
            try:
                info = fs.info(path)
            except (FileNotFoundError, OSError):
                self._kind = "missing"
            else:
                self._kind = "directory" if info.get("type") == "directory" else "file"
                self._size = int(info.get("size") or 0)
        return self._kind

    def exists(self) -> bool:
        return self._info() != "missing"

    def is_file(self) -> bool:
        return self._info() == "file"

    def is_dir(self) -> bool:
        return self._info() == "directory"

    def stat(self) -> _Stat:
        if self._info() == "missing":
            raise FileNotFoundError(f"no such file: {self.url}")
        return _Stat(self._size or 0)

    def _child(self, fs_path: str, base: str, info: dict) -> "RemotePath":
        rel = fs_path[len(base):].lstrip("/") if fs_path.startswith(base) else fs_path.rsplit("/", 1)[-1]
        kind = "directory" if info.get("type") == "directory" else "file"
        return RemotePath(self.url + "/" + rel, kind, int(info.get("size") or 0))

    def iterdir(self) -> Iterator["RemotePath"]:
        fs, path = self._fs()
        base = path.rstrip("/")
        for info in sorted(fs.ls(path, detail=True), key=lambda i: i["name"]):
            name = info["name"].rstrip("/")
            if name != base:
                yield self._child(name, base, info)

    def glob(self, pattern: str) -> Iterator["RemotePath"]:
        fs, path = self._fs()
        base = path.rstrip("/")
        found = fs.glob(base + "/" + pattern.lstrip("/"), detail=True)
        for name, info in sorted(found.items()):
            if name.rstrip("/") != base and fnmatch(name.rstrip("/")[len(base):].lstrip("/"), pattern.strip("/")):
                yield self._child(name.rstrip("/"), base, info)

    def open(self, mode: str = "rb", encoding: str | None = None, errors: str | None = None, **_: Any) -> Any:
        if any(c in mode for c in "wax+"):
            raise ConfigError(f"{self.url}: vlm-perf only reads URLs")
        fs, path = self._fs()
        raw = fs.open(path, "rb")
        if "b" in mode:
            return raw
        return io.TextIOWrapper(raw, encoding=encoding or "utf-8", errors=errors)

    def read_bytes(self) -> bytes:
        with self.open("rb") as fh:
            return cast(bytes, fh.read())

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        with self.open("r", encoding=encoding, errors=errors) as fh:
            return cast(str, fh.read())


def as_path(path: str | os.PathLike | RemotePath) -> Path:
    """``path`` as a `pathlib.Path`, or a `RemotePath` for a URL (typed as Path: it answers the same calls)."""
    if isinstance(path, RemotePath):
        return cast(Path, path)
    if isinstance(path, str) and _URL.match(path):
        return cast(Path, RemotePath(path))
    return Path(path)


def open_binary(path: str | os.PathLike | RemotePath) -> Any:
    """``open(path, "rb")`` for a local path, the fsspec stream for a URL."""
    if isinstance(path, RemotePath) or is_url(path):
        return as_path(path).open("rb")
    return open(path, "rb")


@contextlib.contextmanager
def local_copy(path: str | os.PathLike | RemotePath) -> Iterator[Path]:
    """A local file (or folder of files) with ``path``'s bytes for the duration of the block, for readers that
    need one (SQLite, tbparse): the path itself when local; a URL is streamed to a temporary folder (4 MiB
    blocks) deleted afterwards."""
    if not is_url(path):
        yield Path(path)  # type: ignore[arg-type]
        return
    remote = as_path(path)  # type: ignore[arg-type]
    folder = tempfile.mkdtemp(prefix="vlm-perf-")
    try:
        target = Path(folder) / remote.name
        if remote.is_dir():  # a folder (TensorBoard's): the files directly in it
            target.mkdir()
            sources = [(p, target / p.name) for p in remote.iterdir() if p.is_file()]
        else:
            sources = [(remote, target)]
        for src_path, dst_path in sources:
            with src_path.open("rb") as src, open(dst_path, "wb") as dst:
                shutil.copyfileobj(src, dst, 4 << 20)
        yield target
    finally:
        shutil.rmtree(folder, ignore_errors=True)
