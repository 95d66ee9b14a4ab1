"""The benchmark's charts (`bench --plot`, notebook 03).

Two kinds: "floor", per mode and direction the fraction of each problem's
floor that cupyconv and torch reach (the benchmark problems' chart); and
"speedup", per mode each row's speed-up over torch on a log axis around a
1.0 line, forward and backward side by side (the zoo's chart: its 44 rows
reach a few percent of their floors, too little for bars on a linear axis).
"""

from __future__ import annotations

import numpy

KINDS = ("floor", "speedup")


def plot(rows, path: str, kind=None) -> None:
    """Save figure(rows, kind) as a PNG (without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = figure(rows, kind)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def default_kind(rows) -> str:
    """"speedup" for a suite's rows (a zoo problem among them) with torch
    timed, else "floor"."""
    from .bench_zoo import suite_table

    timed = any(r.torch_ms is not None for r in rows)
    return "speedup" if timed and suite_table([r.problem for r in rows]) else "floor"


def figure(rows, kind=None):
    """The chart of `kind` (KINDS; default_kind(rows) where None)."""
    kind = kind or default_kind(rows)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return floor_figure(rows) if kind == "floor" else speedup_figure(rows)


def _panels(rows):
    """(modes, directions) in the rows' order, and the rows of each (mode, direction)."""
    modes = list(dict.fromkeys((r.dtype, r.precision) for r in rows))
    directions = list(dict.fromkeys(r.backward for r in rows))
    groups = {}
    for r in rows:
        groups.setdefault((r.dtype, r.precision, r.backward), []).append(r)
    return modes, sorted(directions), groups


def floor_figure(rows):
    """A bar chart, one panel per mode (a row of panels) and direction (a
    column): the fraction of each problem's floor that cupyconv and torch
    (the faster of its cuDNN settings, where both were timed) reach (floor
    time / measured time); the dashed line is 80%."""
    import matplotlib.pyplot as plt

    from .bench import mode_label

    modes, directions, groups = _panels(rows)
    torch_label = "torch (cuDNN, the faster setting)" if any(r.torch_default_ms is not None for r in rows) else "torch (cuDNN)"
    most = max(len(g) for g in groups.values())
    width = max(6.0, (0.7 if most <= 12 else 0.45) * most + 2)
    fig, axes = plt.subplots(len(modes), len(directions), figsize=(width * len(directions), 2.6 * len(modes)), squeeze=False)
    for (m, mode), (d, backward) in ((m, d) for m in enumerate(modes) for d in enumerate(directions)):
        ax, panel_rows = axes[m, d], groups.get(mode + (backward,))
        if not panel_rows:
            ax.remove()  # (a mode run in one direction only)
            continue
        xs = numpy.arange(len(panel_rows))
        ax.bar(xs - 0.2, [r.floor_ms / r.ours_ms for r in panel_rows], 0.4, label="cupyconv")
        ax.bar(xs + 0.2, [r.floor_ms / r.torch_ms if r.torch_ms else 0.0 for r in panel_rows], 0.4, label=torch_label)
        ax.axhline(0.8, linestyle="--", color="gray", linewidth=0.8)
        ax.set_xticks(xs)
        ax.set_xticklabels([r.problem.id for r in panel_rows], fontsize=8 if len(panel_rows) > 12 else None)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of floor")
        ax.set_title(mode_label(*mode) + (", backward" if backward else ""), fontsize=10)
    fig.axes[0].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def speedup_figure(rows):
    """One panel per mode: each row's speed-up (torch ms / cupyconv ms, torch
    the faster of its cuDNN settings) as a bar from the 1.0 line on a log
    axis, up where cupyconv is faster; forward and backward side by side,
    each direction's geometric mean dotted and in the title, 2D problems on
    a grey band.  Rows without a torch time are left out."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from .bench import mode_label
    from .bench_zoo import geometric_means

    timed = [r for r in rows if r.torch_ms is not None]
    if not timed:
        raise ValueError("a speed-up chart needs rows with a torch time")
    modes, directions, groups = _panels(timed)
    means = {(m["dtype"], m["precision"], m["backward"]): m for m in geometric_means(timed)}
    speedups = [r.torch_ms / r.ours_ms for r in timed]
    low, high = min(min(speedups), 1.0) / 1.3, max(max(speedups), 1.0) * 1.3
    most = max(len(dict.fromkeys(r.problem.id for r in timed if (r.dtype, r.precision) == mode)) for mode in modes)
    fig, axes = plt.subplots(len(modes), 1, figsize=(max(6.0, 0.3 * most + 2), 3.0 * len(modes)), squeeze=False)
    width = 0.8 / len(directions)
    styles = {False: ("forward", "C0"), True: ("backward", "C1")}
    for ax, mode in zip(axes[:, 0], modes):
        problems = list(dict.fromkeys(r.problem for r in timed if (r.dtype, r.precision) == mode))
        place = {p.id: i for i, p in enumerate(problems)}
        for i, problem in enumerate(problems):
            if problem.dims == 2:
                ax.axvspan(i - 0.5, i + 0.5, color="0.92", linewidth=0, zorder=0)
        title = []
        for k, backward in enumerate(directions):
            group = groups.get(mode + (backward,), [])
            if not group:
                continue
            name, color = styles[backward]
            offset = (k - (len(directions) - 1) / 2) * width
            values = [r.torch_ms / r.ours_ms for r in group]
            ax.bar([place[r.problem.id] + offset for r in group], [v - 1.0 for v in values], width, bottom=1.0, color=color,
                   label=name, zorder=2)  # fmt: skip
            m = means[mode + (backward,)]
            ax.axhline(m["speedup"], color=color, linestyle=":", linewidth=1.2, zorder=3)
            title.append(f"{name} {m['speedup']:.2f}x, faster on {m['wins']} of {m['timed']}")
        ax.axhline(1.0, color="black", linewidth=0.8, zorder=3)
        ax.set_yscale("log")
        ax.set_ylim(low, high)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(-0.6, len(problems) - 0.4)
        ax.set_xticks(range(len(problems)))
        ax.set_xticklabels([p.id for p in problems], fontsize=7 if len(problems) > 20 else None)
        ax.set_ylabel("speed-up over torch")
        ax.set_title(f"{mode_label(*mode)}: geometric mean " + "; ".join(title), fontsize=10)
    handles = [Patch(color=styles[b][1], label=styles[b][0]) for b in directions]
    if any(r.problem.dims == 2 for r in timed):
        handles.append(Patch(color="0.92", label="2D problem"))
    axes[0, 0].legend(handles=handles, loc="upper left", ncol=len(handles), fontsize=8, framealpha=0.9)
    fig.tight_layout()
    return fig
