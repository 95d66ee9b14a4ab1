"""The DDP test's worker (tests/test_ddp.py): one process of a data-parallel
run of a small HiFi-GAN generator, converted to cupyconv or not; it writes
its final parameters and step time.  Imported by the spawned processes, so
it holds no tests."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

STEPS = 20
GLOBAL_BATCH = 4


def build():
    from cupyconv.models import HiFiGANGenerator

    torch.manual_seed(0)
    return HiFiGANGenerator(mels=8, channels=32, rates=(4, 2), kernels=(8, 4), block_kernels=(3,), block_dilations=((1, 3),))


def batches(device):
    """The global batch of each step, the same in every process."""
    generator = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        mel = torch.randn(GLOBAL_BATCH, 8, 6, generator=generator)
        target = torch.rand(GLOBAL_BATCH, 1, 48, generator=generator) * 2 - 1
        yield mel.to(device), target.to(device)


def train(rank: int, world: int, port: int, convert: bool, device_type: str, out: str) -> None:
    """`world` processes (1: no DDP, the whole batch), each on its shard."""
    if device_type == "cuda":
        torch.cuda.set_device(rank)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    model = build().to(device)
    if convert:
        import cupyconv.torch

        cupyconv.torch.convert(model)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if device_type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    shard = GLOBAL_BATCH // world
    times = []
    for mel, target in batches(device):
        mel, target = mel[rank * shard : (rank + 1) * shard], target[rank * shard : (rank + 1) * shard]
        if device_type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.l1_loss(model(mel), target)
        loss.backward()
        optimizer.step()
        if device_type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    module = model.module if world > 1 else model
    if rank == 0:
        state = {name: p.detach().double().cpu() for name, p in module.named_parameters()}
        torch.save({"parameters": state, "step_s": sorted(times[5:])[len(times[5:]) // 2]}, out)
    if world > 1:
        dist.destroy_process_group()
