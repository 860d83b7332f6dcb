"""Training progress: a tqdm bar on a terminal, periodic plain lines when stderr is piped.

A tqdm bar redrawn into a log file or CI output turns into one enormous line of carriage
returns, so when stderr is not a terminal (nor a notebook) :class:`Progress` prints a plain line instead every
``every_fraction`` of the budget (and at least every ``every_seconds``), plus one at the start and one at the end.

Progress counts against the budget that will end the run: the ``episodes`` cap, or (when given) an
``env_steps`` or ``minutes`` budget, whichever is estimated to end the run first; with env steps known
it also shows env steps per second and the time left. :meth:`Progress.tick` refreshes it during a
collection, so the display moves between chunks too.
"""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO

TICK_SECONDS = 2.0  # how often tick() refreshes the display during a collection
FIRST_LINE_SECONDS = 5.0  # plain lines: one early line with a measured rate


def _format(postfix: dict[str, Any]) -> dict[str, Any]:
    return {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in postfix.items() if v is not None}


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Thin wrapper so the trainer never depends on tqdm's API directly.

    ``total`` is the episode cap; ``env_steps`` and ``minutes`` the other budgets of the run (None: none),
    and the display counts against whichever is estimated to end the run first.

    Example:
        >>> import io
        >>> out = io.StringIO()  # not a terminal: plain lines
        >>> bar = Progress(10, stream=out, every_fraction=0.5)
        >>> for ep in range(1, 11):
        ...     bar.update(ep, loss=0.5)
        >>> bar.close()
        >>> print(out.getvalue().strip())
        marl_note: 0/10 episodes (0%) [0 s]
        marl_note: 5/10 episodes (50%), loss=0.5 [0 s]
        marl_note: 10/10 episodes (100%), loss=0.5 [0 s]
        >>> out = io.StringIO()
        >>> bar = Progress(10_000_000, stream=out, env_steps=1000)
        >>> bar.update(1, env_steps=1000)
        >>> print(out.getvalue().splitlines()[-1])  # doctest: +ELLIPSIS
        marl_note: 1000/1000 env steps (100%), ... env steps/s, 0 s left, 1 episodes [0 s]
    """

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 every_fraction: float = 0.05, every_seconds: float = 60.0,
                 env_steps: int | None = None, minutes: float | None = None):
        self.bar: Any = None
        self.total = int(total)
        self.budget_steps = None if env_steps is None else int(env_steps)
        self.budget_seconds = None if minutes is None else 60.0 * float(minutes)
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        # a notebook's stderr is no terminal, but tqdm.auto draws a widget there
        self.plain = enabled and not _is_terminal(self.stream) and "ipykernel" not in sys.modules
        self.every_fraction = float(every_fraction)
        self.every_seconds = float(every_seconds)
        self.start = self.last_time = self.last_tick = time.monotonic()
        self.next_mark = 0.0  # the fraction of the budget at which the next plain line is due
        self.episodes, self.env_steps, self.printed = 0, 0, (-1, -1)
        self.postfix: dict[str, Any] = {}
        if enabled and not self.plain:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, unit="ep", dynamic_ncols=True, file=self.stream,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} {unit}{postfix}")
        if enabled:
            self._show(self.start)

    def update(self, episodes: int, **postfix: Any) -> None:
        """After a chunk: ``episodes`` finished so far, ``env_steps`` (optional) and values to show."""
        if not self.enabled:
            return
        budgeted = self.budget_steps is not None or self.budget_seconds is not None
        steps = postfix.pop("env_steps", None) if budgeted else postfix.get("env_steps")
        if steps is not None:
            self.env_steps = int(steps)
        self.episodes, self.postfix = int(episodes), _format(postfix)
        self._show(time.monotonic())

    def tick(self, env_steps: int) -> None:
        """During a collection: ``env_steps`` of the run so far; refreshes at most every ``TICK_SECONDS``."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last_tick < TICK_SECONDS:
            return
        self.env_steps = int(env_steps)
        self._show(now)

    def _state(self, now: float) -> tuple[float, str, str]:
        """(fraction done, 'done/total unit', extras) against the budget nearest to ending the run."""
        elapsed = now - self.start
        rate = self.env_steps / elapsed if elapsed > 0 and self.env_steps else 0.0
        options = [(min(self.episodes, self.total) / max(self.total, 1),
                    f"{min(self.episodes, self.total)}/{self.total} episodes",
                    (self.total - self.episodes) * elapsed / self.episodes if self.episodes else float("inf"))]
        if self.budget_steps is not None:
            done = min(self.env_steps, self.budget_steps)
            options.append((done / max(self.budget_steps, 1), f"{done}/{self.budget_steps} env steps",
                            (self.budget_steps - done) / rate if rate else float("inf")))
        if self.budget_seconds is not None:
            done_s = min(elapsed, self.budget_seconds)
            options.append((done_s / max(self.budget_seconds, 1e-9),
                            f"{done_s / 60:.1f}/{self.budget_seconds / 60:g} min", self.budget_seconds - done_s))
        # nearest to ending: least estimated time left; before any estimate, the most used
        fraction, text, left = min(options, key=lambda o: (o[2], -o[0]))
        if fraction <= 0 and left == float("inf"):
            fraction, text, left = options[-1]  # nothing measured yet: the tightest budget given
        extra = ""
        if self.budget_steps is not None or self.budget_seconds is not None:
            extra = f", {rate:.0f} env steps/s" + (f", {_duration(left)} left" if left != float("inf") else "")
            if not text.endswith("episodes"):
                extra += f", {self.episodes} episodes"
        return fraction, text, extra

    def _show(self, now: float) -> None:
        self.last_tick = now
        fraction, text, extra = self._state(now)
        if self.bar is not None:
            counts, unit = text.split(" ", 1)
            done, total = (float(x) if "." in x else int(x) for x in counts.split("/"))
            self.bar.total, self.bar.n, self.bar.unit = total, done, unit
            parts = ([extra[2:]] if extra else []) + [f"{k}={v}" for k, v in self.postfix.items()]
            self.bar.set_postfix_str(", ".join(parts), refresh=False)
            self.bar.refresh()
            return
        early = self.printed == (-1, -1) or (now - self.start >= FIRST_LINE_SECONDS > self.last_time - self.start)
        if early or fraction >= self.next_mark or now - self.last_time >= self.every_seconds:
            self._line(now, fraction, text, extra)

    def _line(self, now: float, fraction: float, text: str, extra: str) -> None:
        more = "".join(f", {k}={v}" for k, v in self.postfix.items())
        self.stream.write(f"marl_note: {text} ({fraction:.0%}){extra}{more} [{now - self.start:.0f} s]\n")
        self.stream.flush()
        self.last_time, self.printed = now, (self.episodes, self.env_steps)
        step = max(self.every_fraction, 1e-9)
        self.next_mark = (int(fraction / step + 1e-9) + 1) * step

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.plain and self.printed != (self.episodes, self.env_steps):
            self._line(time.monotonic(), *self._state(time.monotonic()))


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or exotic streams
        return False
