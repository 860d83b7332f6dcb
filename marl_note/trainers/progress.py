"""A tqdm progress bar over training episodes, with the latest metrics as postfix."""
from __future__ import annotations

from typing import Any


class Progress:
    """Thin wrapper so the trainer never depends on tqdm's API directly.

    Example:
        >>> bar = Progress(10, enabled=False)
        >>> bar.update(3, loss=0.5); bar.close()
    """

    def __init__(self, total: int, enabled: bool = True):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="ep", dynamic_ncols=True)

    def update(self, episodes: int, **postfix: Any) -> None:
        if self.bar is None:
            return
        self.bar.n = min(episodes, self.bar.total)
        shown = {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in postfix.items() if v is not None}
        self.bar.set_postfix(shown, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
