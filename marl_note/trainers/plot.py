"""Plots of a training run: the trainer's one figure per run, and :func:`plot_panels` for a few of its panels.

The figure has one panel per kind of series (see :mod:`marl_note.trainers.series`): the test
reward metric, the training reward, the losses, the exploration rates (eps, temperature, noise),
the batch size and other adapted knobs, the other update metrics, and the callbacks' series (an
opponent pool's Elo rating); panels with nothing recorded are left out. The x axis is training
episodes.

:func:`plot_panels` (and the original library's ``visualize_*``, :mod:`marl_note.compat.visualize`)
take a trainer (its current or last run), a ``RunState``, a ``{name: [(episodes, value), ...]}``
dict (``"test_metric"`` for the test history, other names placed by
:func:`~marl_note.trainers.series.panel_of`) or the test history itself. They write a PNG
atomically (default ``runs/<what>_<time>.png``), show it too when matplotlib uses an interactive
backend (``show=None``; ``True``/``False`` force it), and return the file's absolute path. Writing
never changes matplotlib's backend.

Example:
    >>> import tempfile, os
    >>> series = {"test_metric": [(10, 0.2), (20, 0.6)], "loss": [(5, 1.0), (10, 0.7), (20, 0.4)]}
    >>> path = plot_panels(series, ("test", "loss"), os.path.join(tempfile.mkdtemp(), "run.png"), "run", "run",
    ...                    show=False)
    >>> os.path.getsize(path) > 0
    True
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from marl_note.atomic_files import write_atomically
from marl_note.trainers.series import PANELS, panel_of

Points = Sequence[tuple[int, float]]
_FILE_BACKENDS = {"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"}


def check_plot_path(path: str | os.PathLike | None) -> str | None:
    """``path`` as a string if it names a ``.png`` file (or is None); else a ValueError.

    Example:
        >>> check_plot_path("runs/reward.jpg")
        Traceback (most recent call last):
        ...
        ValueError: a plot path must end in .png (plots are written as PNG), got 'runs/reward.jpg'
    """
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"a plot path must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if not isinstance(path, str) or not path.lower().endswith(".png"):
        raise ValueError(f"a plot path must end in .png (plots are written as PNG), got {path!r}")
    return path


def _interactive() -> bool:
    """True when matplotlib's backend shows figures (not a file-only backend such as Agg)."""
    import matplotlib

    return matplotlib.get_backend().lower() not in _FILE_BACKENDS


def _panels(source: Any) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """``{panel: {label: points}}`` of a trainer, a RunState, a series dict or a test history."""
    from marl_note.trainers.run_state import RunState

    if hasattr(source, "run_state") and not isinstance(source, RunState):
        state = source.run_state
        if state is None:
            raise ValueError(f"{type(source).__name__} has no run to plot yet: call train() first")
        source = state
    out: dict[str, dict[str, list[tuple[int, float]]]] = {panel: {} for panel in PANELS}
    if isinstance(source, RunState):
        out["test"]["test reward metric"] = list(source.history)
        for name, s in source.series.items():
            out[s.panel][name] = s.values()
        return out
    if isinstance(source, Mapping):
        for name, points in source.items():
            out[panel_of(str(name))][str(name)] = _points(points, f"series {name!r}")
        return out
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        out["test"]["test reward metric"] = _points(source, "the test history")
        return out
    raise TypeError(f"cannot plot a {type(source).__name__}: pass a trainer, a RunState, a "
                    f"{{name: [(episodes, value), ...]}} dict or a list of (episodes, value) pairs")


def _points(points: Any, what: str) -> list[tuple[int, float]]:
    try:
        return [(int(e), float(v)) for e, v in points]
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a list of (episodes, value) pairs, got {points!r:.80}") from None


def _default_path(what: str) -> str:
    return os.path.join("runs", time.strftime(f"{what}_%Y%m%d-%H%M%S.png"))


def _draw(panels: Mapping[str, Mapping[str, Points]], path: str | None, what: str, title: str,
          show: bool | None) -> str:
    """Draw the non-empty panels (in :data:`PANELS` order) in one figure, save it atomically, maybe show it."""
    path = os.path.abspath(check_plot_path(path) or _default_path(what))
    drawn = [(p, {k: v for k, v in panels.get(p, {}).items() if v}) for p in PANELS]
    drawn = [(p, lines) for p, lines in drawn if lines]
    if not drawn:
        raise ValueError(f"nothing to plot for the {what} plot: no {' or '.join(PANELS[p] for p in panels)} "
                         f"recorded yet")
    show = _interactive() if show is None else bool(show)
    cols = 1 if len(drawn) == 1 else 2
    rows = math.ceil(len(drawn) / cols)
    size = (6.0, 4.0) if cols == 1 else (11.0, 3.2 * rows)
    if show:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=size)
    else:  # a bare Figure: no pyplot state, no backend switch
        from matplotlib.figure import Figure

        fig = Figure(figsize=size)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (panel, lines) in zip(axes, drawn):
        _draw_panel(ax, panel, lines)
    for ax in axes[len(drawn):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:  # a temporary file beside the plot, renamed over it: the umask applies as to any new file
        # the title also as the PNG's Title text (what image viewers show and what a program can read back)
        write_atomically(path, lambda f: fig.savefig(f, format="png", metadata={"Title": title}), suffix=".png")
        if show:
            import matplotlib.pyplot as plt

            plt.show()
    finally:
        if show:
            import matplotlib.pyplot as plt

            plt.close(fig)
    return path


def _draw_panel(ax: Any, panel: str, lines: Mapping[str, Points]) -> None:
    for i, (label, points) in enumerate(lines.items()):
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        style = {"marker": "o", "markersize": 3} if panel == "test" or len(points) < 3 else {}
        ax.plot(xs, ys, color=f"C{i}", label=label, **style)
    values = [v for points in lines.values() for _, v in points]
    if values and min(values) > 0 and max(values) / min(values) > 1e3:
        ax.set_yscale("log")  # losses of very different sizes (PPO's policy and value losses)
    ax.set_title(PANELS[panel], fontsize=10)
    ax.set_xlabel("training episodes")
    ax.grid(alpha=0.3)
    if len(lines) > 1 or panel in ("exploration", "callbacks"):  # a lone loss or reward is named by the title
        ax.legend(fontsize=8)


def run_title(env: str | None, algorithms: Sequence[str], seed: int | None) -> str:
    """The title of a run's plot: the env, the learners' algorithms and the seed, as far as they are known.

    Example:
        >>> run_title("tictactoe_v3", ["DQN", "DQN", "PPO"], 3)
        'marl_note: tictactoe_v3, DQN + PPO, seed 3'
        >>> run_title(None, [], None)
        'marl_note'
    """
    parts = [env] if env else []
    names = list(dict.fromkeys(algorithms))  # each algorithm once, in seat order
    if names:
        parts.append(" + ".join(names))
    if seed is not None:
        parts.append(f"seed {seed}")
    return "marl_note: " + ", ".join(parts) if parts else "marl_note"


def plot_run(run: Any, path: str | None = None, title: str = "marl_note", show: bool = False) -> str:
    """The trainer's figure of a whole run (every panel with data); returns the PNG's absolute path.

    ``run``: a trainer, a ``RunState`` or a series dict (see the module docstring). Default path
    ``runs/reward_<time>.png``; the file gets the usual permissions of a new file (``0o666`` less
    the umask), or keeps those of the plot it replaces.
    """
    return _draw(_panels(run), path, "reward", title, show)


def plot_metric(history: Points, path: str | None = None, title: str = "marl_note",
                extra: Mapping[str, Points] | None = None) -> str:
    """The test reward metric against training episodes, ``extra`` series (e.g. Elo) in a panel beside it.

    Returns the PNG's absolute path (default ``runs/reward_<time>.png``).
    """
    panels = _panels(list(history))
    for label, points in (extra or {}).items():
        panels["callbacks"][str(label)] = _points(points, f"extra series {label!r}")
    return _draw(panels, path, "reward", title, show=False)


def plot_panels(source: Any, panels: Sequence[str], path: str | None, what: str, title: str,
                show: bool | None = None) -> str:
    """The ``panels`` of ``source`` (a trainer, a ``RunState``, a series dict or a test history) in one
    figure written to ``path`` (default ``runs/<what>_<time>.png``); returns the file's absolute path."""
    return _draw(_only(source, panels), path, what, title, show)


def _only(source: Any, wanted: Sequence[str]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    panels = _panels(source)
    return {p: panels[p] for p in wanted}
