"""The benchmark's chart (`bench --plot`, notebook 03): per mode and
direction, the fraction of each problem's floor that cupyconv and torch reach."""

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
    """A bar chart, one panel per mode and direction: the fraction of each
    problem's floor that cupyconv and torch (the faster of its cuDNN
    settings, where both were timed) reach (floor time / measured time)."""
    import matplotlib.pyplot as plt

    from .bench import mode_label

    panels = list(dict.fromkeys((r.dtype, r.precision, r.backward) for r in rows))
    most = max(sum(1 for r in rows if (r.dtype, r.precision, r.backward) == p) for p in panels)
    width = max(6.0, (0.7 if most <= 12 else 0.45) * most + 2)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 2.6 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        panel_rows = [r for r in rows if (r.dtype, r.precision, r.backward) == panel]
        xs = numpy.arange(len(panel_rows))
        ours = [r.floor_ms / r.ours_ms for r in panel_rows]
        theirs = [r.floor_ms / r.torch_ms if r.torch_ms else 0.0 for r in panel_rows]
        ax.bar(xs - 0.2, ours, 0.4, label="cupyconv")
        ax.bar(xs + 0.2, theirs, 0.4, label="torch (cuDNN)")
        ax.axhline(0.8, linestyle="--", color="gray", linewidth=0.8)
        ax.set_xticks(xs)
        ax.set_xticklabels([r.problem.id for r in panel_rows], fontsize=8 if len(panel_rows) > 12 else None)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of floor")
        ax.set_title(mode_label(*panel[:2]) + (", backward" if panel[2] else ""), fontsize=10)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig
