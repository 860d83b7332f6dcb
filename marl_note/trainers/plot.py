"""Save a PNG of the test reward metric against training episodes (the original `visualize_reward`)."""
from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

from marl_note.atomic_files import write_atomically


def plot_metric(history: Sequence[tuple[int, float]], path: str | None = None, title: str = "marl_note",
                extra: Mapping[str, Sequence[tuple[int, float]]] | None = None) -> str:
    """Write the plot atomically and return its absolute path (default ``runs/reward_<time>.png``).

    The file gets the usual permissions of a new file (``0o666`` less the umask), or keeps those
    of the plot it replaces.

    ``extra`` series (e.g. Elo ratings) are drawn against a second y axis.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if path is None:
        path = os.path.join("runs", time.strftime("reward_%Y%m%d-%H%M%S.png"))
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [h[0] for h in history]
    ys = [h[1] for h in history]
    ax.plot(xs, ys, marker="o", markersize=3)
    ax.set_xlabel("training episodes")
    ax.set_ylabel("test reward metric")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if extra:
        ax2 = ax.twinx()
        for i, (label, series) in enumerate(extra.items()):
            if series:
                ax2.plot([p[0] for p in series], [p[1] for p in series], color=f"C{i + 1}", label=label)
        ax2.set_ylabel(", ".join(extra))
        ax2.legend(loc="lower right")
    fig.tight_layout()
    try:  # a temporary file beside the plot, renamed over it: the umask applies as to any new file
        write_atomically(path, lambda f: fig.savefig(f, format="png"), suffix=".png")
    finally:
        plt.close(fig)
    return path


def visualize_reward(history: Sequence[tuple[int, float]], path: str | None = None) -> str:
    """The original library's name for :func:`plot_metric`."""
    return plot_metric(history, path)
