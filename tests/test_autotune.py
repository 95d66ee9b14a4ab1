"""The autotuner's bookkeeping (no GPU needed: the timer is injected), and on
a GPU, that tuned calls stay correct and tune each signature once."""

from __future__ import annotations

import json
import os

import numpy
import pytest

import cupyconv
from cupyconv import _autotune


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_autotune, "_loaded_from", None)
    monkeypatch.setattr(_autotune, "_memory", {})
    monkeypatch.setattr(_autotune, "_enabled", None)
    try:
        from cupyconv import _cuda

        monkeypatch.setattr(_cuda, "_tuned", {})  # the launch layer's per-process choices
    except ImportError:  # no CuPy
        pass
    yield tmp_path


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
    monkeypatch.setattr(_autotune, "_loaded_from", None)  # as if restarted
    monkeypatch.setattr(_autotune, "_memory", {})
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
    assert _autotune.choose("sig4", ["p"], name=str, time=lambda c: 1.0) == "p"
    with pytest.raises(RuntimeError, match="no candidate"):
        _autotune.choose("sig5", ["q"], name=str, time=_timer({"q": None}, []))


def test_other_processes_entries_are_kept(fresh_cache):
    with open(os.path.join(fresh_cache, "autotune.json"), "w") as f:
        json.dump({"elsewhere": "z"}, f)
    _autotune.choose("sig6", ["p"], name=str, time=lambda c: 1.0)
    with open(os.path.join(fresh_cache, "autotune.json")) as f:
        assert json.load(f) == {"elsewhere": "z", "sig6": "p"}


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
    # A sanity bound (the accuracy verdicts per tile are test_gpu.test_every_tile's):
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
