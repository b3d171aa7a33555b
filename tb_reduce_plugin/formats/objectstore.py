"""Logdirs on object stores (`s3://bucket/prefix`, `gs://bucket/prefix`), through fsspec.

`tensorboard --logdir s3://bucket/prefix` lists and serves the traces there as it does
a local logdir's (SPEC §6b). Two things differ from a local folder, and this module
holds both:

- Discovery (`walk`): the store is listed folder by folder (`ls` with details: name,
  size, modification time, ETag or generation), bounded as the local walk is (entries,
  depth, names starting with '.' skipped). Each object gets an identity like a file's
  (`ObjectStat`): its size, its modification time and, in place of an inode, a stable
  63-bit hash of its version tag (ETag, GCS generation), so an object rewritten with
  the same size in the same second is still another version.
- Reads (`local_copy`): the readers open local files (`sources.open_regular`: no
  blocking, identity checks, one `fstat`). An object is streamed once into a staging
  folder (a temporary file, then renamed), refused over the input limit before and
  while it is downloaded, named by its URL and version (a changed object is fetched
  again, the older copy of the same URL removed) and given the object's modification
  time, so every check downstream holds on the copy as it holds on a local file. The
  server and per-host worker tasks both call it; it needs nothing of the server.

Configuration is fsspec's and the store client's own, read from the environment;
this module handles no credentials:
- S3 (s3fs/botocore): `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
  `AWS_PROFILE`, `AWS_DEFAULT_REGION`, and for an S3-compatible server (MinIO, Ceph,
  moto) `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`), e.g.
  `AWS_ENDPOINT_URL=http://127.0.0.1:9000 tensorboard --logdir s3://traces/team`.
- GCS (gcsfs): application-default credentials (`GOOGLE_APPLICATION_CREDENTIALS`,
  `gcloud auth application-default login`, the metadata server).
- Any fsspec option: `FSSPEC_<PROTOCOL>_<OPTION>` (e.g. `FSSPEC_S3_ANON=true`), as
  fsspec reads its configuration.

Install with the extras: `pip install 'tb-reduce-plugin[s3]'` or `'tb-reduce-plugin[gcs]'`.
Without them a `s3://`/`gs://` logdir says what to install, in one line.

Errors are the readers' domain errors: a store that cannot be reached, a missing
bucket, a refused permission is `ObjectStoreError` (a `TraceError`); an object deleted
or rewritten since it was listed is `FileChanged`, so the service lists again; an
object over the limit is `InputTooLarge`. Never a library's traceback.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, BinaryIO, Optional

from ..errors import FileChanged, InputTooLarge, ObjectStoreError, display_name
from .sources import FileIdentity

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# Always object-store URLs, even without fsspec installed (then refused with what to install).
KNOWN_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
# Local paths are read directly, never copied: `file://` is no object store.
LOCAL_SCHEMES = frozenset({"file", "local"})
COPY_CHUNK = 8 * 1024 * 1024  # bytes asked of the store per read while copying
TEMP_PREFIX = ".tmp-"
STALE_TEMP_S = 3600  # a temporary copy this old is a crashed download's leftover
MAX_MESSAGE_CHARS = 300
# An S3 endpoint that does not answer must not hold the run list for minutes (botocore waits
# 60 s per connection attempt by default); set unless the fsspec configuration says otherwise.
S3_CLIENT_CONFIG = {"connect_timeout": 10, "read_timeout": 60}
# Environment variables that configure a store's client: a filesystem made under other
# values (another endpoint, other credentials) is not reused.
_ENV_PREFIXES = ("AWS_", "FSSPEC_", "GOOGLE_", "GCSFS_", "STORAGE_EMULATOR_HOST")


def is_url(path: str) -> bool:
    """Whether `path` names an object store (`scheme://…`) rather than a local path.

    `s3://`, `gs://` (and `gcs://`, `s3a://`) always do; another scheme does when fsspec
    knows it; `file://` never does (local files are read in place).
    """
    if not isinstance(path, str):
        return False
    m = _SCHEME.match(path)
    if m is None:
        return False
    scheme = m.group(1).lower()
    if scheme in LOCAL_SCHEMES:
        return False
    if scheme in KNOWN_SCHEMES:
        return True
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        return False
    return scheme in known_implementations or scheme in registry


@dataclass(frozen=True)
class ObjectStat:
    """An object's listing as a `stat` result, for the catalog's naming code: size,
    modification time, device 0 and, in place of an inode, the version tag's hash."""

    st_size: int
    st_mtime_ns: int
    st_ino: int
    st_dev: int = 0

    def identity(self) -> FileIdentity:
        return FileIdentity(self.st_dev, self.st_ino, self.st_size, self.st_mtime_ns)


@dataclass
class StoreWalk:
    """What `walk` found: (folder URL, name, stat) of every object, and what it left out."""

    entries: list[tuple[str, str, ObjectStat]]
    skipped: list[tuple[str, str]]
    truncated: bool


_fs_lock = threading.Lock()
_filesystems: dict[tuple, Any] = {}


def _env_key() -> tuple:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)))


def _filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for `url` and the path it takes (`bucket/key`).

    One filesystem per protocol, client configuration (the environment variables
    above) and process: made once, since making one starts a client session, and never
    one inherited through a fork (fsspec's async clients are not fork-safe).
    """
    scheme = _SCHEME.match(url).group(1).lower()  # type: ignore[union-attr]
    try:
        import fsspec
    except ImportError:
        extra = KNOWN_SCHEMES.get(scheme, scheme)
        raise ObjectStoreError(f"{scheme}:// logdirs are read through fsspec, which is not installed: "
                               f"pip install 'tb-reduce-plugin[{extra}]'") from None
    key = (scheme, _env_key(), os.getpid())
    with _fs_lock:
        fs = _filesystems.get(key)
        if fs is None:
            try:
                cls = fsspec.get_filesystem_class(scheme)
                options = dict(fsspec.config.conf.get(scheme, {}))
                if KNOWN_SCHEMES.get(scheme) == "s3":
                    options.setdefault("config_kwargs", dict(S3_CLIENT_CONFIG))
                fs = cls(skip_instance_cache=True, **options)
            except ImportError as exc:
                extra = KNOWN_SCHEMES.get(scheme, scheme)
                raise ObjectStoreError(f"{scheme}:// logdirs need a client fsspec could not load ({_one_line(exc)}): "
                                       f"pip install 'tb-reduce-plugin[{extra}]'") from None
            except Exception as exc:
                raise ObjectStoreError(f"cannot set up the {scheme}:// client: {_one_line(exc)}") from None
            for old in [k for k in _filesystems if k[0] == scheme]:
                del _filesystems[old]  # made under another environment or in a parent process: not asked again
            _filesystems[key] = fs
    return fs, fs._strip_protocol(url).rstrip("/")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def _store_error(exc: BaseException, what: str) -> ObjectStoreError:
    """A client's exception as one line a user can act on."""
    if isinstance(exc, ObjectStoreError):
        return exc
    if isinstance(exc, PermissionError):
        why = f"permission denied ({_one_line(exc)})"
    elif isinstance(exc, FileNotFoundError):
        why = f"no such bucket or object ({_one_line(exc)})"
    else:
        name = type(exc).__name__
        detail = _one_line(exc)
        why = detail if name in detail else f"{name}: {detail}"
    return ObjectStoreError(f"{what}: {why}")


def _shown(url: str) -> str:
    return display_name(url)


def _mtime_ns(info: dict) -> int:
    """An object's modification time in ns since the epoch, from whichever key its store gives."""
    for key in ("LastModified", "mtime", "updated", "last_modified", "timeCreated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=timezone.utc)
            whole = int(value.replace(microsecond=0).timestamp())
            return whole * 1_000_000_000 + value.microsecond * 1000
        if isinstance(value, (int, float)):
            return int(value * 1_000_000_000)
    return 0


def _version_hash(info: dict) -> int:
    """A stable 63-bit hash of the object's version tag (0 where the store gives none)."""
    for key in ("ETag", "etag", "generation", "VersionId", "md5Hash", "crc32c"):
        value = info.get(key)
        if value not in (None, ""):
            digest = hashlib.sha256(f"{key}:{str(value).strip(chr(34))}".encode()).digest()
            return (int.from_bytes(digest[:8], "big") >> 1) or 1
    return 0


def object_stat(info: dict) -> ObjectStat:
    """The identity of an object from its listing or `info` (size, mtime, version tag)."""
    return ObjectStat(int(info.get("size") or 0), _mtime_ns(info), _version_hash(info))


def stat(url: str) -> ObjectStat:
    """The object at `url` as the store has it now (not a cached listing)."""
    fs, path = _filesystem(url)
    return object_stat(_info(fs, path, url, None))


def _info(fs: Any, path: str, url: str, expect: Optional[FileIdentity]) -> dict:
    fs.invalidate_cache(path)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        if expect is not None:
            raise FileChanged(f"{_shown(_basename(url))} changed since it was listed (it is gone)") from None
        raise ObjectStoreError(f"cannot read {_shown(url)}: no such object") from None
    except Exception as exc:
        raise _store_error(exc, f"cannot read {_shown(url)}") from None
    if info.get("type") == "directory":
        raise FileChanged(f"{_shown(_basename(url))} changed since it was listed (it is now a folder)")
    return info


def _check_same(url: str, info: Any, expect: Optional[FileIdentity]) -> None:
    if expect is None or not isinstance(info, dict):
        return
    now = object_stat(info)
    if (now.st_size, now.st_ino, now.st_mtime_ns) != (expect.size, expect.ino, expect.mtime_ns):
        raise FileChanged(f"{_shown(_basename(url))} changed since it was listed (another version is in the store now)")


def _basename(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def walk(url: str, max_entries: int, max_depth: int) -> StoreWalk:
    """The objects under `url`, folder by folder, depth first: names starting with '.'
    skipped, at most `max_depth` folders deep, at most `max_entries` entries visited.

    Raises `ObjectStoreError` when `url` itself cannot be listed (unreachable, no such
    bucket, no permission); a folder below it that cannot be listed is noted in
    `skipped` and the walk goes on.
    """
    fs, root = _filesystem(url)
    scheme = _SCHEME.match(url).group(1)  # type: ignore[union-attr]
    # Every listing current: the client caches folder listings, and dropping a folder's
    # entry drops its parents' only, not its subfolders' (s3fs), so all of it goes.
    fs.invalidate_cache()
    entries: list[tuple[str, str, ObjectStat]] = []
    skipped: list[tuple[str, str]] = []
    visited = 0
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        folder_url = f"{scheme}://{folder}"
        try:
            listing = fs.ls(folder, detail=True)
        except Exception as exc:
            if folder == root:
                if isinstance(exc, FileNotFoundError):
                    raise ObjectStoreError(f"cannot list {_shown(url)}: no such bucket or prefix") from None
                raise _store_error(exc, f"cannot list {_shown(url)}") from None
            skipped.append((folder_url, f"cannot be listed ({_store_error(exc, 'error')})"))
            continue
        for info in sorted(listing, key=lambda i: str(i.get("name", "")), reverse=True):
            name = str(info.get("name", "")).rstrip("/")
            base = name.rsplit("/", 1)[-1]
            if not base or name == folder or not name.startswith(folder + "/"):
                continue  # the folder's own placeholder object, or an odd listing
            visited += 1
            if visited > max_entries:
                skipped.append((folder_url, f"not walked to the end: the walk stops after {max_entries:,} entries"))
                return StoreWalk(entries, skipped, True)
            if base.startswith("."):
                continue
            if info.get("type") == "directory":
                if depth >= max_depth:
                    skipped.append((f"{scheme}://{name}", f"deeper than {max_depth} folders: not walked"))
                    continue
                stack.append((name, depth + 1))
                continue
            entries.append((folder_url, base, object_stat(info)))
    return StoreWalk(entries, skipped, False)


def read_head(url: str, expect: Optional[FileIdentity], limit: int) -> bytes:
    """The first `limit` bytes of the object (one range read), if it is still the listed version."""
    fs, path = _filesystem(url)
    try:
        with fs.open(path, "rb", block_size=max(limit, 1), cache_type="none") as f:
            _check_same(url, getattr(f, "details", None), expect)
            return f.read(limit)
    except FileNotFoundError:
        raise FileChanged(f"{_shown(_basename(url))} changed since it was listed (it is gone)") from None
    except (FileChanged, ObjectStoreError):
        raise
    except Exception as exc:
        if _expired(exc):
            raise FileChanged(f"{_shown(_basename(url))} changed while it was read") from None
        raise _store_error(exc, f"cannot read {_shown(url)}") from None


def _expired(exc: BaseException) -> bool:
    """Whether the store refused a read because the object is another version now
    (s3fs's `FileExpired`: the ETag it opened with no longer matches)."""
    return type(exc).__name__ == "FileExpired" or "PreconditionFailed" in str(exc) or "pre-conditions" in str(exc)


def _local_name(url: str) -> str:
    """The copy's file name: the object's own (messages name the file as the listing
    does), unless it could not be a local file name."""
    base = _basename(url)
    if not base or base in (".", "..") or "\x00" in base or os.sep in base or len(base.encode(errors="replace")) > 200:
        return "object"
    return base


def copy_path(url: str, expect: FileIdentity, cache_dir: str) -> str:
    """Where `local_copy` puts this version of `url`: `<cache_dir>/<url hash>/<version hash>/<name>`."""
    url_key = hashlib.sha256(url.encode(errors="surrogatepass")).hexdigest()[:32]
    version = hashlib.sha256(f"{expect.size}:{expect.dev}:{expect.ino}:{expect.mtime_ns}".encode()).hexdigest()[:16]
    return os.path.join(cache_dir, url_key, version, _local_name(url))


def local_copy(url: str, expect: FileIdentity, cache_dir: str, max_bytes: int) -> str:
    """A local file holding exactly the version of the object `url` that `expect` names
    (as the listing saw it: `ObjectStat.identity()`), for the readers to open.

    `cache_dir` is the staging folder (the service passes `<its cache dir>/objects`).
    A copy made before is reused; otherwise the object is streamed into a temporary
    file and renamed into place, its mtime set to the object's, and the copies of
    other versions of the same URL removed. An object over `max_bytes` is refused
    before a byte is fetched (by the listing's size, then the store's) and while it is
    fetched; one gone or rewritten since the listing is `FileChanged`.
    """
    shown = _shown(_basename(url))
    if expect.size > max_bytes:
        raise InputTooLarge(f"{shown} is {expect.size:,} bytes, over the input limit of {max_bytes:,} bytes",
                            size=expect.size, limit=max_bytes)
    final = copy_path(url, expect, cache_dir)
    version_dir = os.path.dirname(final)
    url_dir = os.path.dirname(version_dir)
    try:
        st = os.stat(final)
        if st.st_size == expect.size and st.st_mtime_ns == expect.mtime_ns:
            return final
    except OSError:
        pass
    fs, path = _filesystem(url)
    info = _info(fs, path, url, expect)
    _check_same(url, info, expect)
    size = int(info.get("size") or 0)
    if size > max_bytes:
        raise InputTooLarge(f"{shown} is {size:,} bytes, over the input limit of {max_bytes:,} bytes",
                            size=size, limit=max_bytes)
    try:
        os.makedirs(version_dir, exist_ok=True)
    except OSError as exc:
        raise ObjectStoreError(f"cannot stage {shown} in {cache_dir}: {exc.strerror or exc}") from None
    tmp = os.path.join(url_dir, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
    try:
        _download(fs, path, url, tmp, expect, max_bytes)
        os.utime(tmp, ns=(time.time_ns(), expect.mtime_ns))
        os.replace(tmp, final)
    except OSError as exc:
        raise ObjectStoreError(f"cannot stage {shown} in {cache_dir}: {exc.strerror or exc}") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    _remove_others(url_dir, os.path.basename(version_dir))
    return final


def _download(fs: Any, path: str, url: str, tmp: str, expect: FileIdentity, max_bytes: int) -> None:
    """Stream the object into `tmp`: the listed version only, never more than `max_bytes`."""
    shown = _shown(_basename(url))
    written = 0
    try:
        with fs.open(path, "rb", block_size=COPY_CHUNK, cache_type="none") as src, open(tmp, "wb") as dst:
            _check_same(url, getattr(src, "details", None), expect)
            while True:
                chunk: bytes = _read(src, COPY_CHUNK)
                if not chunk:
                    break
                written += len(chunk)
                if written > max_bytes:
                    raise InputTooLarge(f"{shown} is over the input limit of {max_bytes:,} bytes (while downloading)",
                                        size=written, limit=max_bytes)
                if written > expect.size:
                    raise FileChanged(f"{shown} changed since it was listed (it is longer now)")
                try:
                    dst.write(chunk)
                except OSError as exc:  # the staging disk, not the store (full, read-only)
                    raise ObjectStoreError(f"cannot stage {shown} in {os.path.dirname(tmp)}: "
                                           f"{exc.strerror or exc}") from None
    except FileNotFoundError:
        raise FileChanged(f"{shown} changed since it was listed (it is gone)") from None
    except (FileChanged, InputTooLarge, ObjectStoreError):
        raise
    except OSError as exc:
        if _expired(exc):
            raise FileChanged(f"{shown} changed while it was downloaded; try again") from None
        if getattr(exc, "filename", None) == tmp:
            raise
        raise _store_error(exc, f"cannot read {_shown(url)}") from None
    except Exception as exc:
        raise _store_error(exc, f"cannot read {_shown(url)}") from None
    if written != expect.size:
        raise FileChanged(f"{shown} changed since it was listed ({expect.size:,} bytes then, {written:,} read)")


def _read(src: BinaryIO, n: int) -> bytes:
    try:
        return src.read(n)
    except Exception as exc:
        if _expired(exc):
            raise FileChanged(f"{_shown(_basename(getattr(src, 'path', 'object')))} changed while it was downloaded; "
                              "try again") from None
        raise


def _remove_others(url_dir: str, keep: str) -> None:
    """Copies of other versions of the URL go (a reader holding one open keeps reading
    it); a crashed download's temporary file goes once it is old."""
    try:
        names = os.listdir(url_dir)
    except OSError:
        return
    now = time.time()
    for name in names:
        if name == keep:
            continue
        full = os.path.join(url_dir, name)
        if name.startswith(TEMP_PREFIX):
            try:
                if now - os.stat(full).st_mtime < STALE_TEMP_S:
                    continue
                os.unlink(full)
            except OSError:
                pass
            continue
        shutil.rmtree(full, ignore_errors=True)
