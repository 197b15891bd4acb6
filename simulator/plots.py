"""Figures of simulation results (matplotlib, Agg backend: files only, no display)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot_allocation(
    curves: Mapping[str, Mapping[int, float]],
    path: Path,
    *,
    title: str = "GPU allocation vs arrived GPU demand",
    reference: Mapping[str, Mapping[int, float]] | None = None,
) -> Path:
    """One line per policy (allocation % against arrived-demand %), optional published points."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, curve in curves.items():
        xs = sorted(curve)
        line = ax.plot(xs, [curve[x] for x in xs], label=name, linewidth=1.4)[0]
        if reference and name in reference:
            ref = reference[name]
            ax.scatter(sorted(ref), [ref[x] for x in sorted(ref)], marker="x", s=18,
                       color=line.get_color())
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("arrived GPU demand (% of cluster GPUs)")
    ax.set_ylabel("GPUs allocated (%)")
    ax.set_title(title + (" (x: published means)" if reference else ""))
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_series(
    series: Mapping[str, Sequence[tuple[float, float]]],
    path: Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    step: bool = False,
) -> Path:
    """Generic line plot of named (x, y) series: utilisation over time, wait CDFs."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, points in series.items():
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        if step:
            ax.step(xs, ys, where="post", label=name)
        else:
            ax.plot(xs, ys, label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_replay(
    runs: Mapping[str, tuple[Sequence[tuple[float, float]], Sequence[float]]],
    path: Path,
    *,
    title: str = "Gang replay",
) -> Path:
    """Two panels per replay: GPU utilisation over time, and the CDF of gang waits.

    ``runs`` maps a scheduler name to ``(utilisation steps (seconds, percent), waits)``.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for name, (steps, waits) in runs.items():
        if steps:
            hours = [t / 3600.0 for t, _ in steps]
            left.step(hours, [u for _, u in steps], where="post", label=name, linewidth=1.2)
        if waits:
            ordered = sorted(waits)
            fraction = [(i + 1) / len(ordered) for i in range(len(ordered))]
            right.step([w / 60.0 for w in ordered], fraction, where="post", label=name)
    left.set_xlabel("time (hours)")
    left.set_ylabel("GPUs bound (%)")
    left.set_ylim(0, 105)
    left.set_title("GPU utilisation over time")
    right.set_xlabel("gang wait, arrival to start (minutes)")
    right.set_ylabel("fraction of admitted gangs")
    right.set_ylim(0, 1.02)
    right.set_title("gang wait CDF")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
