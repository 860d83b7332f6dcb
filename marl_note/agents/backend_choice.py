"""``backend="auto"``: which backend trains an algorithm's agents here, and why (imports no framework).

:func:`choose_backend` picks ``"numpy"`` where ``bench/bench_numpy_step.py`` measured the numpy
backend's gradient steps faster than torch's on a CPU (:data:`NUMPY_FASTER`: the algorithm and the
widest hidden layer measured), and ``"torch"`` otherwise: for an accelerator (any ``device`` but the
CPU), a conv or user-supplied torso, image observations (read through a conv torso), an algorithm
without a numpy class, one where numpy was not measured faster, or wider networks than measured.
TensorFlow is never chosen by ``auto`` (ask for ``backend="tf"``). The answer names its reason, which
the command line prints in the run header.

Example:
    >>> import gymnasium as gym
    >>> box = gym.spaces.Box(-1, 1, (4,))
    >>> choose_backend("dqn", options={"hidden_sizes": (64, 64)}, observation_spaces=[box])
    BackendChoice(backend='numpy', reason='MLP dqn (64-64) on the CPU: bench/ measured the numpy backend faster')
    >>> choose_backend("dqn", options={"hidden_sizes": (64, 64), "device": "cuda"}).backend
    'torch'
    >>> choose_backend("ddpg", options={}).reason
    'ddpg: bench/ has not measured the numpy backend faster; torch'
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from marl_note.agents import registry

__all__ = ["BackendChoice", "NUMPY_FASTER", "choose_backend"]

#: Algorithm -> the widest hidden layer at which ``bench/bench_numpy_step.py`` measured the numpy backend's
#: step faster than torch's, one thread each, the BLAS warmed up (docs/benchmarks.md, "The numpy backend":
#: DQN 256-256 0.44x, PPO 128-128 0.27x, SAC 256-256 0.60x).
NUMPY_FASTER: Mapping[str, int] = {"dqn": 256, "ppo": 128, "sac": 256}


@dataclass(frozen=True)
class BackendChoice:
    """The backend ``auto`` chose and why (one line, for a run header).

    Example:
        >>> BackendChoice("torch", "a conv torso").backend
        'torch'
    """

    backend: str
    reason: str


def _default_hidden(entry: registry.Algorithm) -> tuple[int, ...] | None:
    config = getattr(entry.core_cls(), "config_class", None)
    fields = getattr(config, "__dataclass_fields__", {})
    return tuple(fields["hidden_sizes"].default) if "hidden_sizes" in fields else None


def _image(space: Any) -> bool:
    from marl_note.agents.maddpg_seats import image_observation  # numpy only

    return bool(image_observation(space))


def choose_backend(algo: str, *, options: Mapping[str, Any] | None = None,
                   observation_spaces: Iterable[Any] = ()) -> BackendChoice:
    """The backend ``auto`` picks for the registered algorithm ``algo`` built with constructor ``options``
    (``device``, ``torso``, ``hidden_sizes`` are read) for agents observing ``observation_spaces``.

    Raises :class:`~marl_note.agents.registry.UnknownAlgorithm` for an unregistered name, and a ValueError
    for an algorithm that has neither a torch nor a numpy class (``auto`` never picks TensorFlow).
    """
    entry = registry.get(algo)
    options = {} if options is None else options
    have = entry.backends
    if "torch" not in have:
        if "numpy" in have:
            return BackendChoice("numpy", f"{algo} has no torch class")
        raise ValueError(f"backend 'auto' picks torch or numpy, and {algo} has neither (it has "
                         f"{', '.join(have)}): ask for backend='tf'")
    device = options.get("device", "cpu")
    if device not in (None, "cpu"):
        return BackendChoice("torch", f"device={device!r}: an accelerator trains through torch")
    if "numpy" not in have:
        return BackendChoice("torch", f"{algo} has no numpy class")
    torso = options.get("torso", "auto")
    if torso == "conv":
        return BackendChoice("torch", "a conv torso (the numpy backend builds MLPs only)")
    if not (isinstance(torso, str) and torso in ("auto", "mlp")):
        return BackendChoice("torch", "a user-supplied torso (a framework module)")
    if torso == "auto" and any(_image(s) for s in observation_spaces):
        return BackendChoice("torch", "image observations (read through a conv torso)")
    if algo not in NUMPY_FASTER:
        return BackendChoice("torch", f"{algo}: bench/ has not measured the numpy backend faster; torch")
    hidden = options.get("hidden_sizes", _default_hidden(entry)) or ()
    sizes = "-".join(str(int(h)) for h in hidden) or "no hidden layers"
    widest = max((int(h) for h in hidden), default=0)
    if widest > NUMPY_FASTER[algo]:
        return BackendChoice("torch", f"{algo} ({sizes}): wider than the {NUMPY_FASTER[algo]} units at which bench/ "
                                      f"measured the numpy backend faster")
    return BackendChoice("numpy", f"MLP {algo} ({sizes}) on the CPU: bench/ measured the numpy backend faster")
