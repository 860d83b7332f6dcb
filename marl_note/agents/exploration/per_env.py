"""Exploration noise kept per env: one copy of a noise process for every vectorized env, numpy only.

A stateful process (Ornstein-Uhlenbeck) shared by several envs would mix their episodes: each
env's sample would move the others' state, and the end of any env's episode would restart it
for all. :class:`PerEnvNoise` keeps one copy of a template process per env index, made on first
use, each with its own rng stream (``SeedSequence(seed, spawn_key=(env,))``), so envs explore
independently and only an ended env's copy is reset.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["PerEnvNoise"]

_ENV, _SEED = "env.", "env_seed"


class PerEnvNoise:
    """One copy of ``template`` per env index: ``sample(env_ids)`` draws row ``k`` from env
    ``env_ids[k]``'s copy, ``reset(env_ids)`` restarts only those envs' copies.

    ``template`` is any process with ``sample()`` (optionally ``reset()``, ``state_dict()``,
    ``load_state_dict()``, an ``rng`` Generator that is reseeded per copy) whose sample holds one
    action (``dim`` numbers). It is never sampled itself; copies start from its state (e.g. its
    annealing position), and each copy anneals over its own samples, i.e. over its env's steps.

    Example:
        >>> from marl_note.agents.exploration.noise import OrnsteinUhlenbeckProcess
        >>> noise = PerEnvNoise(OrnsteinUhlenbeckProcess(theta=0.15, sigma=0.5, size=(2,)), dim=2, seed=0)
        >>> eps = noise.sample([0, 1])
        >>> eps.shape, bool(np.all(eps[0] != eps[1]))
        ((2, 2), True)
        >>> noise.reset([1]); noise.processes[1].x_prev.tolist(), bool(np.any(noise.processes[0].x_prev != 0))
        ([0.0, 0.0], True)
    """

    def __init__(self, template: Any, dim: int, seed: int):
        if not callable(getattr(template, "sample", None)):
            raise TypeError(f"a noise process needs sample(), got {type(template).__name__}")
        size = getattr(template, "size", None)
        if size is not None and int(np.prod(size, dtype=np.int64)) != int(dim):
            raise ValueError(f"the noise process has size {tuple(np.atleast_1d(size))} but one action has {dim} "
                             f"numbers; give the process the size of one action (a copy is kept per env)")
        self.template, self.dim, self.seed = template, int(dim), int(seed)
        self.processes: dict[int, Any] = {}

    def process(self, env: int) -> Any:
        """Env ``env``'s copy of the template (made on first use)."""
        env = int(env)
        if env < 0:
            raise ValueError(f"env indices must be non-negative, got {env}")
        if env not in self.processes:
            p = copy.deepcopy(self.template)
            if isinstance(getattr(p, "rng", None), np.random.Generator):
                p.rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(env,)))
            self.processes[env] = p
        return self.processes[env]

    def sample(self, env_ids: Iterable[int]) -> np.ndarray:
        """``[len(env_ids), dim]`` float64: one sample of each row's env copy, in row order."""
        rows = [np.asarray(self.process(e).sample(), np.float64).reshape(-1) for e in np.asarray(env_ids).reshape(-1)]
        return np.stack(rows) if rows else np.zeros((0, self.dim))

    def reset(self, env_ids: Iterable[int] | None = None) -> None:
        """Restart the copies of ``env_ids`` (all copies when None); envs without a copy are skipped."""
        envs = list(self.processes) if env_ids is None else [int(e) for e in np.unique(np.asarray(env_ids))]
        for e in envs:
            reset = getattr(self.processes.get(e), "reset", None)
            if callable(reset):
                reset()

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The template's state under its own keys, ``env_seed`` and each copy's as ``env.<i>.<key>``."""
        out = {_SEED: np.asarray(self.seed, np.int64)}
        for prefix, p in [("", self.template)] + [(f"{_ENV}{e}.", p) for e, p in sorted(self.processes.items())]:
            fn = getattr(p, "state_dict", None)
            if callable(fn):
                out.update({prefix + k: np.asarray(v) for k, v in fn().items()})
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (copies not in ``state`` are dropped); a state without ``env.``
        keys (one process shared by all envs) restores the template only."""
        if _SEED in state:
            self.seed = int(np.asarray(state[_SEED]))
        own: dict[int, dict[str, Any]] = {}
        template = {}
        for k, v in state.items():
            if k.startswith(_ENV):
                env, _, key = k[len(_ENV):].partition(".")
                own.setdefault(int(env), {})[key] = v
            elif k != _SEED:
                template[k] = v
        if template and callable(getattr(self.template, "load_state_dict", None)):
            self.template.load_state_dict(template)
        self.processes = {}
        for env_index, st in sorted(own.items()):
            p = self.process(env_index)
            if callable(getattr(p, "load_state_dict", None)):
                p.load_state_dict(st)
