"""The benchmark's chart (`bench --plot`, notebook 03): per mode, the
fraction of each problem's floor that cupyconv and torch reach."""

from __future__ import annotations

import numpy


def plot(rows, path: str) -> None:
    """Save figure(rows) as a PNG (without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = figure(rows)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figure(rows):
    """A bar chart, one panel per mode: the fraction of each problem's floor
    that cupyconv and torch reach (floor time / measured time)."""
    import matplotlib.pyplot as plt

    from .bench import mode_label

    modes = list(dict.fromkeys((r.dtype, r.precision) for r in rows))
    width = max(6.0, 0.7 * max(sum(1 for r in rows if (r.dtype, r.precision) == m) for m in modes) + 2)
    fig, axes = plt.subplots(len(modes), 1, figsize=(width, 2.6 * len(modes)), squeeze=False)
    for ax, mode in zip(axes[:, 0], modes):
        mode_rows = [r for r in rows if (r.dtype, r.precision) == mode]
        xs = numpy.arange(len(mode_rows))
        ours = [r.floor_ms / r.ours_ms for r in mode_rows]
        theirs = [r.floor_ms / r.torch_ms if r.torch_ms else 0.0 for r in mode_rows]
        ax.bar(xs - 0.2, ours, 0.4, label="cupyconv")
        ax.bar(xs + 0.2, theirs, 0.4, label="torch (cuDNN)")
        ax.axhline(0.8, linestyle="--", color="gray", linewidth=0.8)
        ax.set_xticks(xs)
        ax.set_xticklabels([r.problem.id for r in mode_rows])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of floor")
        ax.set_title(mode_label(*mode), fontsize=10)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig
