"""The benchmark's model suite (``python -m cupyconv bench --models``):
real architectures written with torch.nn from their papers (no weights: a
benchmark needs none), except HDemucs, which is torchaudio's, each with the
batch it trains on and its loss.  ``scale`` shrinks widths and batches so
that tests can run tiny versions."""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

# --------------------------------------------------------------------------
# The models, from the papers' architecture descriptions.


def _scaled(value: int, scale: float) -> int:
    return max(1, round(value * scale))


class ResBlock1(nn.Module):
    """HiFi-GAN's residual block type 1: for each dilation, two convolutions of
    `kernel_size` (the first dilated, the second not) with a residual sum,
    leaky ReLU 0.1 before each; lengths are kept ("same" padding)."""

    def __init__(self, channels: int, kernel_size: int, dilations=(1, 3, 5)):
        super().__init__()
        self.dilated = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=d * (kernel_size - 1) // 2) for d in dilations
        )
        self.plain = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, padding=(kernel_size - 1) // 2) for _ in dilations)

    def forward(self, x):
        for dilated, plain in zip(self.dilated, self.plain):
            x = x + plain(F.leaky_relu(dilated(F.leaky_relu(x, 0.1)), 0.1))
        return x


class HiFiGANGenerator(nn.Module):
    """HiFi-GAN V1's generator (Kong, Kim and Bae 2020): mel spectrogram
    (N, 80, frames) to waveform (N, 1, 256 * frames).  A 7-tap convolution to
    512 channels, four upsampling stages (a transposed convolution that
    halves the channels, then the mean of three ResBlock1 of kernels 3, 7,
    11), a 7-tap convolution to one channel and tanh.  The paper's weight
    normalisation is left out: it reparametrises the weights without
    changing the shapes or the convolutions that run."""

    def __init__(self, mels: int = 80, channels: int = 512, rates=(8, 8, 2, 2), kernels=(16, 16, 4, 4),
                 block_kernels=(3, 7, 11), block_dilations=((1, 3, 5),) * 3):  # fmt: skip
        super().__init__()
        self.conv_pre = nn.Conv1d(mels, channels, 7, padding=3)
        self.ups = nn.ModuleList()
        self.blocks = nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(rates, kernels)):
            width = channels // 2 ** (i + 1)
            self.ups.append(nn.ConvTranspose1d(2 * width, width, kernel, rate, padding=(kernel - rate) // 2))
            self.blocks.append(nn.ModuleList(ResBlock1(width, k, d) for k, d in zip(block_kernels, block_dilations)))
        self.conv_post = nn.Conv1d(channels // 2 ** len(rates), 1, 7, padding=3)

    def forward(self, mel):
        x = self.conv_pre(mel)
        for up, blocks in zip(self.ups, self.blocks):
            x = up(F.leaky_relu(x, 0.1))
            x = sum(block(x) for block in blocks) / len(blocks)
        # The reference implementation's last activation has torch's default slope.
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


class DCGANGenerator(nn.Module):
    """DCGAN's generator (Radford, Metz and Chintala 2016) for 64x64 RGB:
    a latent (N, nz, 1, 1) through a 4x4 transposed convolution to 8*ngf
    channels at 4x4, then four 4x4 stride-2 stages that halve the channels
    and double the side, BatchNorm and ReLU after all but the last, tanh out;
    no biases (BatchNorm's shift takes their place), as in the reference."""

    def __init__(self, nz: int = 100, ngf: int = 64, out_channels: int = 3):
        super().__init__()
        widths = [8 * ngf, 4 * ngf, 2 * ngf, ngf]
        layers = [nn.ConvTranspose2d(nz, widths[0], 4, 1, 0, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(True)]
        for c_in, c_out in zip(widths, widths[1:]):
            layers += [nn.ConvTranspose2d(c_in, c_out, 4, 2, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(True)]
        layers += [nn.ConvTranspose2d(widths[-1], out_channels, 4, 2, 1, bias=False), nn.Tanh()]
        self.main = nn.Sequential(*layers)

    def forward(self, z):
        return self.main(z)


class UNetGenerator(nn.Module):
    """pix2pix's U-Net generator (Isola et al. 2017) for 256x256: eight 4x4
    stride-2 convolutions (C64-C128-C256-C512-C512-C512-C512-C512, leaky ReLU
    0.2 before all but the first, BatchNorm after all but the first and the
    innermost) down to 1x1, eight 4x4 stride-2 transposed convolutions back
    up (ReLU before each, BatchNorm after all but the last, dropout 0.5 in
    the three innermost), each decoder block but the first taking its input
    concatenated with the mirrored encoder block's output, tanh out.
    Convolutions followed by BatchNorm have no bias."""

    def __init__(self, in_channels: int = 3, out_channels: int = 3, ngf: int = 64, depth: int = 8):
        super().__init__()
        widths = [ngf * min(2**i, 8) for i in range(depth)]
        self.down = nn.ModuleList()
        for i, width in enumerate(widths):
            norm = 0 < i < depth - 1
            layers = [] if i == 0 else [nn.LeakyReLU(0.2)]
            layers.append(nn.Conv2d(in_channels if i == 0 else widths[i - 1], width, 4, 2, 1, bias=not norm))
            if norm:
                layers.append(nn.BatchNorm2d(width))
            self.down.append(nn.Sequential(*layers))
        self.up = nn.ModuleList()
        for i in reversed(range(depth)):  # innermost first
            c_in = widths[i] if i == depth - 1 else 2 * widths[i]
            c_out = out_channels if i == 0 else widths[i - 1]
            layers = [nn.ReLU(), nn.ConvTranspose2d(c_in, c_out, 4, 2, 1, bias=i == 0)]
            if i > 0:
                layers.append(nn.BatchNorm2d(c_out))
            if i >= depth - 3:
                layers.append(nn.Dropout(0.5))
            if i == 0:
                layers.append(nn.Tanh())
            self.up.append(nn.Sequential(*layers))

    def forward(self, x):
        skips = []
        for down in self.down:
            x = down(x)
            skips.append(x)
        skips.pop()  # the innermost output is x itself
        for k, up in enumerate(self.up):
            x = up(x if k == 0 else torch.cat([x, skips.pop()], 1))
        return x


# --------------------------------------------------------------------------
# The registry: how to build each model, its inputs and its loss.


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model of the suite.  build(scale) makes it on the CPU; batch(device,
    generator, scale) makes (inputs, target) from a generator on the device
    that draws them; `scale` multiplies the widths and the batch (and the
    length, in 1-D models), so that tests can run tiny versions."""

    source: str
    size: str  # the training batch at scale 1, for the report
    build: Callable
    batch: Callable
    loss: Callable
    inference: Callable | None = None  # (device, generator, scale) -> inputs of a forward-only run
    inference_size: str = ""
    requires: tuple = ()  # modules that must import for it to run


def _randn(shape, device, generator, scale_by: float = 1.0):
    return (torch.randn(shape, generator=generator, device=generator.device) * scale_by).to(device)


def _uniform(shape, device, generator):
    """Uniform in [-1, 1), the range of a tanh output."""
    return (torch.rand(shape, generator=generator, device=generator.device) * 2 - 1).to(device)


HIFIGAN_FRAMES = 32  # an 8192-sample training segment at 256 samples a frame
HIFIGAN_INFERENCE_FRAMES = 862  # 10 s at 22,050 Hz: 220,672 samples


def _hifigan_batch(device, generator, scale):
    batch, frames = _scaled(16, scale), _scaled(HIFIGAN_FRAMES, scale)
    return (_randn((batch, 80, frames), device, generator),), _uniform((batch, 1, 256 * frames), device, generator)


def _hifigan_inference(device, generator, scale):
    return (_randn((1, 80, _scaled(HIFIGAN_INFERENCE_FRAMES, scale)), device, generator),)


def _dcgan_batch(device, generator, scale):
    batch = _scaled(128, scale)
    return (_randn((batch, 100, 1, 1), device, generator),), _uniform((batch, 3, 64, 64), device, generator)


def _pix2pix_batch(device, generator, scale):
    batch = _scaled(16, scale)
    return (_uniform((batch, 3, 256, 256), device, generator),), _uniform((batch, 3, 256, 256), device, generator)


HDEMUCS_SOURCES = ["drums", "bass", "other", "vocals"]


def _hdemucs(scale):
    import torchaudio

    if scale == 1:
        return torchaudio.models.hdemucs_low(sources=HDEMUCS_SOURCES)
    # hdemucs_low's settings with fewer channels (a multiple of its 4 norm groups).
    return torchaudio.models.HDemucs(sources=HDEMUCS_SOURCES, nfft=1024, depth=5, channels=4 * _scaled(12, scale))


def _hdemucs_batch(device, generator, scale):
    batch, length = _scaled(4, scale), _scaled(4 * 44100, scale)
    mixture = _randn((batch, 2, length), device, generator, 0.1)
    return (mixture,), _randn((batch, len(HDEMUCS_SOURCES), 2, length), device, generator, 0.1)


MODELS = {
    "hifigan": ModelSpec(
        "HiFi-GAN V1 generator (Kong, Kim and Bae 2020), without weight norm",
        f"batch 16 x 80 mels x {HIFIGAN_FRAMES} frames -> 8192 samples, L1 loss on the waveform",
        lambda scale: HiFiGANGenerator(channels=_scaled(512, scale)),
        _hifigan_batch,
        F.l1_loss,
        inference=_hifigan_inference,
        inference_size=f"batch 1 x 80 mels x {HIFIGAN_INFERENCE_FRAMES} frames (10 s at 22,050 Hz) -> {256 * HIFIGAN_INFERENCE_FRAMES:,} samples",
    ),
    "dcgan": ModelSpec(
        "DCGAN generator (Radford, Metz and Chintala 2016), 64x64 RGB",
        "batch 128 x 100-dim latent -> 3x64x64, MSE loss against a target image",
        lambda scale: DCGANGenerator(ngf=_scaled(64, scale)),
        _dcgan_batch,
        F.mse_loss,
    ),
    "pix2pix": ModelSpec(
        "pix2pix U-Net generator (Isola, Zhu, Zhou and Efros 2017), 256x256",
        "batch 16 x 3x256x256 -> 3x256x256, L1 loss against a target image",
        lambda scale: UNetGenerator(ngf=_scaled(64, scale)),
        _pix2pix_batch,
        F.l1_loss,
    ),
    "hdemucs": ModelSpec(
        "Hybrid Demucs (Defossez 2021), torchaudio.models.hdemucs_low with 4 sources (torchaudio makes its STFT windows on the "
        "host in every call, and their copies to the GPU synchronise)",
        "batch 4 x stereo 176,400 samples (4 s at 44.1 kHz) -> 4 sources, L1 loss",
        _hdemucs,
        _hdemucs_batch,
        F.l1_loss,
        requires=("torchaudio",),
    ),
}
