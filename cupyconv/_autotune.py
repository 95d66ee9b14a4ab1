"""Tile choice per problem: a heuristic by default, measured when asked.

With autotuning on (``CUPYCONV_AUTOTUNE=1`` in the environment, or
``cupyconv.set_autotune(True)``), the first call of a kernel family on a new
(device, dtype, index type, geometry) signature times every candidate tile
configuration on the call's own arrays, keeps the fastest, and writes it to a
JSON file, so later calls and later processes on the same kind of GPU pay
nothing: ``$CUPYCONV_CACHE_DIR/autotune.json``, by default
``~/.cache/cupyconv/autotune.json``.  A progress bar (tqdm, on stderr) shows
while it times.  A cache file that cannot be used is ignored with a
CacheWarning; saves are locked (``autotune.json.lock``), merge into what is
there and replace the file atomically, so concurrent processes keep each
other's entries.

This module imports no CuPy: the timer is passed in by the caller (``_cuda``
uses ``cupyx.profiler.benchmark``), so the bookkeeping is tested on the CPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import warnings
from typing import Callable, Dict, Iterator, Optional, Sequence, TypeVar

try:
    import fcntl
except ImportError:  # pragma: no cover - e.g. Windows: the atomic replace alone
    fcntl = None

Candidate = TypeVar("Candidate")

_enabled: Optional[bool] = None  # None: follow CUPYCONV_AUTOTUNE
_lock = threading.Lock()
_memory: Dict[str, str] = {}  # signature -> winning candidate's name
_loaded_from: Optional[str] = None
_warned: set = set()  # cache paths already warned about in this process


class CacheWarning(RuntimeWarning):
    """The autotune cache file could not be used (it is ignored, and rewritten on the next save)."""


def set_enabled(flag: Optional[bool]) -> None:
    """True or False overrides the environment; None follows CUPYCONV_AUTOTUNE again."""
    global _enabled
    if flag is not None and not isinstance(flag, bool):
        raise TypeError(f"autotune flag must be True, False or None, got {flag!r}")
    _enabled = flag


# CPython keeps os.environ's contents in a dict of encoded keys and values
# (os.environ._data, kept current by os.environ's own setters).  A remembered
# call asks enabled() every time, and os.environ.get of an unset variable
# raises and catches two KeyErrors: 0.7 us a call on this machine, more on the
# H100 machines' hosts.  Elsewhere, os.environ.get.
try:
    _ENVIRON, _NAME = os.environ._data, os.environ.encodekey("CUPYCONV_AUTOTUNE")
except AttributeError:  # pragma: no cover - not CPython
    _ENVIRON, _NAME = None, None


def enabled() -> bool:
    if _enabled is not None:
        return _enabled
    if _ENVIRON is not None and _NAME not in _ENVIRON:
        return False
    value = os.environ.get("CUPYCONV_AUTOTUNE", "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def restart() -> None:
    """Forget the cache file's entries read so far, this process's choices and
    warnings, and set_enabled's flag: the state a new process starts in (tests)."""
    global _loaded_from, _enabled
    with _lock:
        _memory.clear()
        _warned.clear()
        _loaded_from, _enabled = None, None


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """A block that starts as a new process would (restart()) and leaves this
    process's autotuning state as it found it (tests)."""
    global _loaded_from, _enabled
    with _lock:
        saved = dict(_memory), set(_warned), _loaded_from, _enabled
    restart()
    try:
        yield
    finally:
        with _lock:
            _memory.clear()
            _memory.update(saved[0])
            _warned.clear()
            _warned.update(saved[1])
            _loaded_from, _enabled = saved[2], saved[3]


def cache_path() -> str:
    folder = os.environ.get("CUPYCONV_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "cupyconv")
    return os.path.join(folder, "autotune.json")


def _read(path: str) -> Dict[str, str]:
    """The cache file's entries; {} if it is missing, or (with a warning,
    once per path) if it cannot be read or is not a JSON object of strings."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:  # ValueError: bad JSON or bad UTF-8
        return _ignore(path, f"{type(e).__name__}: {e}")
    if not isinstance(data, dict):
        return _ignore(path, f"a JSON {type(data).__name__}, not an object")
    for key, value in data.items():
        if not isinstance(value, str):
            return _ignore(path, f"entry {key!r} is a {type(value).__name__}, not a string")
    return data


def _ignore(path: str, what: str) -> Dict[str, str]:
    if path not in _warned:
        _warned.add(path)
        warnings.warn(f"cupyconv: ignoring the autotune cache {path} ({what}); it is rewritten on the next save", CacheWarning)
    return {}


def _load() -> None:
    """Read the disk cache once per path (again if CUPYCONV_CACHE_DIR changes)."""
    global _loaded_from
    path = cache_path()
    if _loaded_from != path:
        _memory.clear()
        _memory.update(_read(path))
        _loaded_from = path


def _store(signature: str, name: str) -> None:
    """Remember a winner in memory and on disk.  A cache that cannot be
    written is not an error: the winner is still kept for this process."""
    _memory[signature] = name
    path = cache_path()
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        # The lock serialises savers, so each merges into what the last one
        # wrote and no entry is lost; readers take none (the replace is atomic).
        with open(path + ".lock", "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
            data = _read(path)
            data[signature] = name
            _write_atomically(folder, path, data)
    except OSError:
        pass


def _write_atomically(folder: str, path: str, data: Dict[str, str]) -> None:
    """Write a temporary file beside `path` and rename it over `path`, so a
    reader or a crash never sees a partly written cache."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".autotune-", suffix=".json.tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=0, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it the cache
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remembered(signature: str) -> Optional[str]:
    with _lock:
        _load()
        return _memory.get(signature)


def choose(
    signature: str,
    candidates: Sequence[Candidate],
    name: Callable[[Candidate], str],
    time: Callable[[Candidate], float],
    label: str = "",
) -> Candidate:
    """The candidate remembered for `signature`, else the fastest by `time`
    (seconds; a candidate that raises is skipped), remembered from now on."""
    by_name = {name(c): c for c in candidates}
    with _lock:
        _load()
        known = _memory.get(signature)
        if known in by_name:
            return by_name[known]
        from tqdm.auto import tqdm

        best, best_time = None, float("inf")
        for candidate in tqdm(candidates, desc=f"cupyconv autotune {label}".rstrip(), unit="config", leave=False):
            try:
                seconds = time(candidate)
            except Exception:  # e.g. a configuration the device cannot launch
                continue
            if seconds < best_time:
                best, best_time = candidate, seconds
        if best is None:
            raise RuntimeError(f"autotune: no candidate configuration ran for {label or signature}")
        _store(signature, name(best))
        return best
