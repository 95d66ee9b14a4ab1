"""The autotuner's bookkeeping (no GPU needed: the timer is injected), and on
a GPU, that tuned calls stay correct and tune each signature once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy
import pytest

import cupyconv
from cupyconv import _autotune


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    with _autotune.isolated():
        try:
            from cupyconv import _launch
        except ImportError:  # no CuPy
            yield tmp_path
            return
        # the per-process choices, one dict that _cuda fills and _remember watches: emptied for the test, restored after
        saved = dict(_launch._tuned)
        _launch._tuned.clear()
        yield tmp_path
        _launch._tuned.clear()
        _launch._tuned.update(saved)


def _timer(costs, calls):
    def time(candidate):
        calls.append(candidate)
        if costs[candidate] is None:
            raise RuntimeError("cannot launch")
        return costs[candidate]

    return time


def test_enabled_follows_the_environment_unless_set(monkeypatch):
    for value, expected in [("", False), ("0", False), ("off", False), ("1", True), ("yes", True)]:
        monkeypatch.setenv("CUPYCONV_AUTOTUNE", value)
        assert _autotune.enabled() is expected
    monkeypatch.setenv("CUPYCONV_AUTOTUNE", "1")
    cupyconv.set_autotune(False)
    assert not _autotune.enabled()
    cupyconv.set_autotune(None)
    assert _autotune.enabled()
    with pytest.raises(TypeError, match="autotune flag"):
        cupyconv.set_autotune("yes")


def test_fastest_wins_is_remembered_and_written(fresh_cache):
    calls = []
    costs = {"a": 3.0, "b": 1.0, "c": None, "d": 2.0}
    chosen = _autotune.choose("sig1", list(costs), name=str, time=_timer(costs, calls))
    assert chosen == "b" and calls == ["a", "b", "c", "d"]  # the failing one is skipped
    again = _autotune.choose("sig1", list(costs), name=str, time=_timer(costs, calls))
    assert again == "b" and len(calls) == 4  # not timed twice
    with open(os.path.join(fresh_cache, "autotune.json")) as f:
        assert json.load(f) == {"sig1": "b"}


def test_a_new_process_reads_the_winner_from_disk(fresh_cache, monkeypatch):
    _autotune.choose("sig2", ["x", "y"], name=str, time=lambda c: {"x": 2.0, "y": 1.0}[c])
    _autotune.restart()
    calls = []
    assert _autotune.choose("sig2", ["x", "y"], name=str, time=_timer({"x": 0.0, "y": 1.0}, calls)) == "y"
    assert calls == []
    assert _autotune.remembered("sig2") == "y"


def test_a_stale_winner_is_tuned_again(fresh_cache):
    _autotune.choose("sig3", ["old", "other"], name=str, time=lambda c: {"old": 1.0, "other": 2.0}[c])
    calls = []
    assert _autotune.choose("sig3", ["new", "other"], name=str, time=_timer({"new": 0.5, "other": 2.0}, calls)) == "new"
    assert calls == ["new", "other"]


def test_unreadable_cache_and_no_runnable_candidate(fresh_cache):
    with open(os.path.join(fresh_cache, "autotune.json"), "w") as f:
        f.write("{not json")
    with pytest.warns(_autotune.CacheWarning):
        assert _autotune.choose("sig4", ["p"], name=str, time=lambda c: 1.0) == "p"
    with pytest.raises(RuntimeError, match="no candidate"):
        _autotune.choose("sig5", ["q"], name=str, time=_timer({"q": None}, []))


def test_other_processes_entries_are_kept(fresh_cache):
    with open(os.path.join(fresh_cache, "autotune.json"), "w") as f:
        json.dump({"elsewhere": "z"}, f)
    _autotune.choose("sig6", ["p"], name=str, time=lambda c: 1.0)
    with open(os.path.join(fresh_cache, "autotune.json")) as f:
        assert json.load(f) == {"elsewhere": "z", "sig6": "p"}


# What a crash, a full disk, an older version or a stray editor can leave.
CORRUPT = {
    "invalid JSON": b"{not json",
    "truncated JSON": b'{\n"sig_a": "p",\n"sig_b": "q',
    "empty file": b"",
    "a JSON list": b'["sig_a", "p"]',
    "JSON null": b"null",
    "an entry not a string": b'{"sig_a": "p", "sig_b": 3}',
    "an entry a list": b'{"sig_a": ["p"]}',
    "not UTF-8": b'{"sig_a": "\xff\xfe"}',
}


def _assert_rewritten(folder, expected):
    with open(os.path.join(folder, "autotune.json"), encoding="utf-8") as f:
        assert json.load(f) == expected


@pytest.mark.parametrize("content", list(CORRUPT.values()), ids=list(CORRUPT))
def test_a_corrupt_cache_warns_once_reads_as_empty_and_is_rewritten(fresh_cache, content):
    path = os.path.join(fresh_cache, "autotune.json")
    with open(path, "wb") as f:
        f.write(content)
    with pytest.warns(_autotune.CacheWarning, match="autotune cache") as caught:
        assert _autotune.remembered("sig_a") is None  # treated as empty
    assert len(caught) == 1 and path in str(caught[0].message)
    assert issubclass(_autotune.CacheWarning, RuntimeWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per path: the save's re-read does not warn again
        assert _autotune.choose("sig_c", ["p"], name=str, time=lambda c: 1.0) == "p"
    _assert_rewritten(fresh_cache, {"sig_c": "p"})


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="needs POSIX symlinks")
def test_an_unreadable_cache_warns_and_is_replaced(fresh_cache):
    # A symlink to itself fails to open (ELOOP) even for root, where chmod 0 would not.
    path = os.path.join(fresh_cache, "autotune.json")
    os.symlink("autotune.json", path)
    with pytest.warns(_autotune.CacheWarning, match="OSError"):
        assert _autotune.choose("sig_d", ["p"], name=str, time=lambda c: 1.0) == "p"
    assert not os.path.islink(path)
    _assert_rewritten(fresh_cache, {"sig_d": "p"})


def test_a_leftover_temporary_file_is_harmless(fresh_cache):
    # A process killed mid-save leaves its temporary file; the cache itself stays whole.
    with open(os.path.join(fresh_cache, ".autotune-dead.json.tmp"), "w") as f:
        f.write('{"sig_e": "half')
    _autotune.choose("sig_e", ["p"], name=str, time=lambda c: 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _autotune.choose("sig_f", ["q"], name=str, time=lambda c: 1.0)
    _assert_rewritten(fresh_cache, {"sig_e": "p", "sig_f": "q"})
    assert not [n for n in os.listdir(fresh_cache) if n.endswith(".tmp") and n != ".autotune-dead.json.tmp"]


def test_saving_without_fcntl_still_replaces_atomically(fresh_cache, monkeypatch):
    monkeypatch.setattr(_autotune, "fcntl", None)  # as on Windows
    _autotune.choose("sig_g", ["p"], name=str, time=lambda c: 1.0)
    _autotune.choose("sig_h", ["q"], name=str, time=lambda c: 1.0)
    _assert_rewritten(fresh_cache, {"sig_g": "p", "sig_h": "q"})


# Each child waits for the other before tuning, so their saves overlap.
_TUNER = """
import os, sys, time
from cupyconv import _autotune
me, other, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
folder = os.environ["CUPYCONV_CACHE_DIR"]
open(os.path.join(folder, "ready-" + me), "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(folder, "ready-" + other)) and time.monotonic() < deadline:
    time.sleep(0.001)
for i in range(count):
    _autotune.choose(f"{me}-{i}", [me], name=str, time=lambda c: 1.0)
"""


def test_two_processes_tuning_at_once_keep_all_entries(fresh_cache):
    count = 150
    root = os.path.dirname(os.path.dirname(os.path.abspath(_autotune.__file__)))
    env = dict(os.environ, CUPYCONV_CACHE_DIR=str(fresh_cache), PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    children = [
        subprocess.Popen([sys.executable, "-c", _TUNER, me, other, str(count)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for me, other in (("A", "B"), ("B", "A"))
    ]
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err.decode(errors="replace")
        assert b"CacheWarning" not in err  # no reader ever saw a partial file
    expected = {f"{me}-{i}": me for me in "AB" for i in range(count)}
    _assert_rewritten(fresh_cache, expected)


try:
    import cupy

    HAVE_GPU = cupy.is_available()
except Exception:
    cupy, HAVE_GPU = None, False


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype, precision", [("float32", "highest"), ("float32", "tf32"), ("float16", "highest")])
def test_tuned_calls_are_correct_and_tune_once(fresh_cache, monkeypatch, dtype, precision):
    from cupyconv import _cuda, reference

    from sweep import relative_error

    cupyconv.set_autotune(True)
    timed = []
    real = _cuda._gpu_seconds
    monkeypatch.setattr(_cuda, "_gpu_seconds", lambda run: timed.append(run) or real(run))
    rng = numpy.random.default_rng(30)
    x = rng.standard_normal((2, 24, 300)).astype(dtype)
    w = (rng.standard_normal((24, 16, 5)) / 10).astype(dtype)
    kwargs = dict(stride=3, padding=2, groups=2)
    expected = reference.conv_transpose1d(x.astype(numpy.float64), w.astype(numpy.float64), **kwargs)
    gy = rng.standard_normal(expected.shape).astype(dtype)
    exp_grads = reference.conv_transpose1d_backward(gy.astype(numpy.float64), x.astype(numpy.float64), w.astype(numpy.float64), **kwargs)
    # A sanity bound (the accuracy verdicts per tile are tests/gpu/test_gemm.py's test_every_tile's):
    # float32 "highest" as always; else ten times a 16-bit or TF32 rounding.
    bound = 1e-5 if precision == "highest" and dtype == "float32" else 5e-3
    for attempt in range(2):
        y = cupyconv.conv_transpose1d(cupy.asarray(x), cupy.asarray(w), **kwargs, precision=precision)
        grads = cupyconv.conv_transpose1d_backward(cupy.asarray(gy), cupy.asarray(x), cupy.asarray(w), **kwargs, precision=precision)
        assert relative_error(cupy.asnumpy(y), expected) < bound
        for grad, exp in zip(grads, exp_grads):
            assert relative_error(cupy.asnumpy(grad), exp) < bound
        if attempt == 0:
            tuned = len(timed)
            assert tuned > 0
        else:
            assert len(timed) == tuned  # remembered, not timed again
    with open(os.path.join(fresh_cache, "autotune.json")) as f:
        entries = json.load(f)
    assert any("forward" in k for k in entries) and any("grad_weight" in k for k in entries)
