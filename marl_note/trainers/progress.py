"""Training progress: a tqdm bar on a terminal, periodic plain lines when stderr is piped.

A tqdm bar redrawn into a log file or CI output turns into one enormous line of carriage
returns, so when stderr is not a terminal (nor a notebook) :class:`Progress` prints a plain line instead every
``every_fraction`` of the budget (and at least every ``every_seconds``), plus one at the end.
"""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _format(postfix: dict[str, Any]) -> dict[str, Any]:
    return {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in postfix.items() if v is not None}


class Progress:
    """Thin wrapper so the trainer never depends on tqdm's API directly.

    Example:
        >>> import io
        >>> out = io.StringIO()  # not a terminal: plain lines
        >>> bar = Progress(10, stream=out, every_fraction=0.5)
        >>> for ep in range(1, 11):
        ...     bar.update(ep, loss=0.5)
        >>> bar.close()
        >>> print(out.getvalue().strip())
        marl_note: 5/10 episodes (50%), loss=0.5 [0 s]
        marl_note: 10/10 episodes (100%), loss=0.5 [0 s]
    """

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 every_fraction: float = 0.05, every_seconds: float = 60.0):
        self.bar = None
        self.total = int(total)
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        # a notebook's stderr is no terminal, but tqdm.auto draws a widget there
        self.plain = enabled and not _is_terminal(self.stream) and "ipykernel" not in sys.modules
        self.step = max(1, int(round(self.total * every_fraction)))
        self.every_seconds = float(every_seconds)
        self.start = self.last_time = time.monotonic()
        self.next_mark = self.step
        self.episodes, self.printed = 0, -1
        self.postfix: dict[str, Any] = {}
        if enabled and not self.plain:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="ep", dynamic_ncols=True, file=self.stream)

    def update(self, episodes: int, **postfix: Any) -> None:
        if not self.enabled:
            return
        shown = _format(postfix)
        if self.bar is not None:
            self.bar.n = min(episodes, self.bar.total)
            self.bar.set_postfix(shown, refresh=False)
            self.bar.refresh()
            return
        self.episodes, self.postfix = episodes, shown
        now = time.monotonic()
        if episodes >= self.next_mark or now - self.last_time >= self.every_seconds:
            self._line(now)
            self.next_mark = (episodes // self.step + 1) * self.step

    def _line(self, now: float) -> None:
        shown = min(self.episodes, self.total)
        extra = "".join(f", {k}={v}" for k, v in self.postfix.items())
        self.stream.write(f"marl_note: {shown}/{self.total} episodes ({shown / max(self.total, 1):.0%})"
                          f"{extra} [{now - self.start:.0f} s]\n")
        self.stream.flush()
        self.last_time, self.printed = now, self.episodes

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.plain and self.printed != self.episodes:
            self._line(time.monotonic())


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or exotic streams
        return False
