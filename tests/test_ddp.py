"""DistributedDataParallel over converted models: a small HiFi-GAN generator
trained 20 steps by two processes, converted to cupyconv, ends with the
parameters of the same run unconverted and of one process on the combined
batch.  On the CPU (gloo; the adapter's CPU path: its registration,
autograd and DDP's gradient hooks) everywhere, and on two GPUs (NCCL,
cupyconv's kernels, TF32 off) where torch sees two."""

from __future__ import annotations

import os
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing  # noqa: E402

import ddp_worker  # noqa: E402

TWO_GPUS = torch.cuda.is_available() and torch.cuda.device_count() >= 2
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not TWO_GPUS, reason="needs two CUDA GPUs")])]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, name, world, convert, device):
    out = str(tmp_path / f"{name}.pt")
    if world == 1:
        ddp_worker.train(0, 1, 0, convert, device, out)
    else:
        torch.multiprocessing.spawn(ddp_worker.train, args=(world, _free_port(), convert, device, out), nprocs=world, join=True)
    return torch.load(out)


@pytest.mark.parametrize("device", DEVICES)
def test_ddp_trains_a_converted_model_as_torch_does(device, tmp_path):
    converted = _run(tmp_path, "converted", 2, True, device)
    plain = _run(tmp_path, "plain", 2, False, device)
    single = _run(tmp_path, "single", 1, False, device)
    tolerance = 1e-12 if device == "cpu" else 1e-5  # the CPU path is torch's own convolution
    for name, p in plain["parameters"].items():
        scale = p.abs().max().item() + 1e-30
        assert (converted["parameters"][name] - p).abs().max().item() <= tolerance * scale + 1e-12, name
        assert (single["parameters"][name] - p).abs().max().item() <= 1e-5 * scale, name
    assert any((plain["parameters"][n] - ddp_worker.build().state_dict()[n].double()).abs().max() > 0 for n in plain["parameters"])
    print(f"DDP step on {device}: converted {converted['step_s'] * 1e3:.2f} ms, unconverted {plain['step_s'] * 1e3:.2f} ms")
