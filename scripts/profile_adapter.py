"""Where the torch adapter's per-call time goes on a tiny problem (X4's shape).

Run on a GPU machine: ``PYTHONPATH=. python scripts/profile_adapter.py``.
Times each layer of the adapter on its own (host wall time per call, mean of
many calls, the GPU idle), from the whole forward+backward down to a bare
kernel launch, next to torch's own.
"""

import time

import cupy
import torch

import cupyconv
import cupyconv.torch as ct
from cupyconv import _cuda, _geometry
from cupyconv.torch import _bridge, _functional

x = torch.randn(1, 4, 5, device="cuda", requires_grad=True)
w = torch.randn(4, 8, 3, device="cuda", requires_grad=True)
b = torch.randn(8, device="cuda", requires_grad=True)
gy = torch.randn(1, 8, 7, device="cuda")
xd, wd, bd = x.detach(), w.detach(), b.detach()
xc, wc, bc, gyc = (cupy.from_dlpack(t.detach()) for t in (x, w, b, gy))
yc = cupy.empty((1, 8, 7), dtype=cupy.float32)
args = ([1], [0], [0], 1, [1])
geometry = _geometry.make_geometry(1, (1, 4, 5), (4, 8, 3), (8,), 1, 0, 0, 1, 1)


def per_call(fn, n=400):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e6


def _enter_exit():
    with _bridge._on_torch_stream(xd.device):
        pass


y_ours = ct.conv_transpose1d(x, w, b)
y_torch = torch.nn.functional.conv_transpose1d(x, w, b)

steps = {
    "torch backward alone (autograd, retained graph)": lambda: torch.autograd.backward(y_torch, gy, retain_graph=True),
    "adapter backward alone (autograd, retained graph)": lambda: torch.autograd.backward(y_ours, gy, retain_graph=True),
    "torch forward+backward (autograd)": lambda: torch.autograd.backward(torch.nn.functional.conv_transpose1d(x, w, b), gy),
    "adapter forward+backward (autograd)": lambda: torch.autograd.backward(ct.conv_transpose1d(x, w, b), gy),
    "torch forward, no grad": lambda: torch.nn.functional.conv_transpose1d(xd, wd, bd),
    "adapter forward, no grad": lambda: ct.conv_transpose1d(xd, wd, bd),
    "adapter forward, with grad (autograd node)": lambda: ct.conv_transpose1d(x, w, b),
    "  op call (torch.ops), no grad": lambda: torch.ops.cupyconv.conv_transpose(xd, wd, bd, *args, "highest"),
    "  _forward_impl": lambda: _functional._forward_impl(xd, wd, bd, *args, "highest"),
    "  _bridge.forward (remembered launch)": lambda: _bridge.forward(xd, wd, bd, geometry, "highest"),
    "  _bridge.forward, checked": lambda: (_bridge._FAST_FORWARD.clear(), _bridge.forward(xd, wd, bd, geometry, "highest")),
    "  make_geometry": lambda: _geometry.make_geometry(1, (1, 4, 5), (4, 8, 3), (8,), (1,), (0,), (0,), 1, (1,)),
    "  to_cupy x3": lambda: (_bridge.to_cupy(xd), _bridge.to_cupy(wd), _bridge.to_cupy(bd)),
    "  _on_torch_stream enter/exit": lambda: _enter_exit(),
    "  _cuda.forward on CuPy arrays": lambda: _cuda.forward(xc, wc, bc, geometry, "highest"),
    "  _cuda.forward on CuPy arrays, out given": lambda: _cuda.forward(xc, wc, bc, geometry, "highest", out=yc),
    "  cupyconv.conv_transpose1d on CuPy arrays": lambda: cupyconv.conv_transpose1d(xc, wc, bc),
    "  wrapper pieces: allow_tf32 + _autocast": lambda: (torch.backends.cudnn.allow_tf32, _functional._autocast((xd, wd, bd), "cuda")),
    "adapter backward op, direct": lambda: torch.ops.cupyconv.conv_transpose_backward(gy, xd, wd, *args, [True] * 3, "highest"),
    "  _bridge.backward": lambda: _bridge.backward(gy, xd, wd, geometry, (True, True, True), "highest"),
    "  _cuda.backward on CuPy arrays": lambda: _cuda.backward(gyc, xc, wc, geometry, (True, True, True), "highest"),
    "  _cuda._grad_input": lambda: _cuda.backward(gyc, xc, wc, geometry, (True, False, False), "highest"),
    "  _cuda._grad_weight": lambda: _cuda.backward(gyc, xc, wc, geometry, (False, True, False), "highest"),
    "  _cuda._grad_bias": lambda: _cuda.backward(gyc, xc, wc, geometry, (False, False, True), "highest"),
    "torch.empty x1": lambda: torch.empty(64, device="cuda"),
    "cupy.empty x1": lambda: cupy.empty(64),
}


def _through_operator(fn):
    """Run fn through the custom op (the eager path off: what torch.compile
    and dispatch modes take, and every call before perf notes v52)."""

    def run():
        _functional.EAGER_FAST_PATH = False
        try:
            return fn()
        finally:
            _functional.EAGER_FAST_PATH = True

    return run


for name in ("adapter forward+backward (autograd)", "adapter forward, no grad", "adapter forward, with grad (autograd node)"):
    steps[name + ", through the operator"] = _through_operator(steps[name])
_functional.EAGER_FAST_PATH = False
y_operator = ct.conv_transpose1d(x, w, b)
_functional.EAGER_FAST_PATH = True
steps["adapter backward alone (autograd, retained graph), through the operator"] = lambda: torch.autograd.backward(
    y_operator, gy, retain_graph=True
)

for name, fn in steps.items():
    if "autograd" in name or "with grad" in name:
        t = per_call(fn)
    else:
        with torch.no_grad():
            t = per_call(fn)
    print(f"{t:9.1f} us  {name}")

# Inside the forward+backward loop: how long the bridge's forward and backward
# take there (the backward runs on autograd's device thread), against the loop.
spent = {"forward": 0.0, "backward": 0.0}


def _timed(name, fn):
    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start

    return run


_bridge.forward, _bridge.backward = _timed("forward", _bridge.forward), _timed("backward", _bridge.backward)
n = 400
total = per_call(steps["adapter forward+backward (autograd)"], n)
calls = n + 20
print(f"{total:9.1f} us  adapter forward+backward, of which _bridge.forward {spent['forward'] / calls * 1e6:.1f} us"
      f" and _bridge.backward {spent['backward'] / calls * 1e6:.1f} us")
