"""``torch.compile`` for the agents' loss functions, opt-in and never fatal."""
from __future__ import annotations

import warnings
from collections.abc import Callable

import torch


def maybe_compile(fn: Callable, enabled: bool, what: str) -> Callable:
    """``torch.compile(fn)`` when ``enabled``, else ``fn``.

    Compilation happens lazily at the first call; if it fails there (no C++ toolchain for
    inductor, an unsupported op, ...) a RuntimeWarning says so and ``fn`` runs eagerly from then
    on, so ``compile=True`` can slow an agent down but never break it.

    Example:
        >>> import torch
        >>> square = maybe_compile(lambda x: x * x, enabled=False, what="square")
        >>> square(torch.tensor(3.0)).item()
        9.0
    """
    if not enabled:
        return fn
    try:
        compiled = torch.compile(fn)
    except Exception as exc:  # pragma: no cover - depends on the installation
        warnings.warn(f"torch.compile of the {what} is unavailable ({type(exc).__name__}: {exc}); running eagerly",
                      RuntimeWarning, stacklevel=2)
        return fn
    state = {"fn": compiled}

    def call(*args, **kwargs):
        if state["fn"] is compiled:
            try:
                return compiled(*args, **kwargs)
            except Exception as exc:
                warnings.warn(f"torch.compile of the {what} failed ({type(exc).__name__}: {exc}); "
                              f"running eagerly", RuntimeWarning, stacklevel=2)
                state["fn"] = fn
        return fn(*args, **kwargs)

    return call
