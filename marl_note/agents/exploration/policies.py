"""Exploration policies over action values, numpy only and backend neutral.

The names follow the keras-rl vocabulary (``EpsGreedyQPolicy``, ``BoltzmannQPolicy``, ...), but
everything is batched and mask aware::

    policy.select(values [B, n], mask [B, n] bool | None, rng) -> actions [B] int64

Illegal entries (``mask == False``) are set to ``-inf`` before any argmax or softmax, so a policy
never returns an illegal action. Every row must have at least one legal action. (These masked
primitives are in :mod:`marl_note.agents.exploration.masked`.)

Epsilon and temperature can be annealed linearly: give the final value (``eps_min`` /
``tau_min``) and ``n_steps_annealing``; the owning agent calls ``policy.step(n)`` with the number
of new agent steps. ``state_dict()`` / ``load_state_dict()`` save the schedule position (and
any per-policy statistics) as numpy arrays.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from marl_note.agents.exploration.masked import (
    argmax_checked,
    boltzmann_probs,
    check_values,
    gumbel_noise,
    masked_argmax,
    masked_softmax,
    sample_categorical,
    uniform_legal,
)

__all__ = [
    "LinearSchedule", "Policy", "GreedyQPolicy", "EpsGreedyQPolicy", "SoftmaxPolicy",
    "BoltzmannQPolicy", "MaxBoltzmannQPolicy", "BoltzmannGumbelQPolicy", "GumbelSoftmaxPolicy",
]


# --------------------------------------------------------------------------- schedule

class LinearSchedule:
    """A value going linearly from ``start`` to ``end`` over ``n_steps`` steps, then constant.

    ``end=None`` means constant ``start``.

    Example:
        >>> s = LinearSchedule(1.0, 0.0, 10)
        >>> s.value(0), s.value(5), s.value(100)
        (1.0, 0.5, 0.0)
    """

    def __init__(self, start: float, end: float | None = None, n_steps: int = 1):
        if end is not None and n_steps <= 0:
            raise ValueError(f"n_steps_annealing must be positive, got {n_steps}")
        self.start = float(start)
        self.end = float(start) if end is None else float(end)
        self.n_steps = int(n_steps)

    def value(self, t: int) -> float:
        if self.end == self.start or t >= self.n_steps:
            return self.end
        frac = max(0, t) / self.n_steps
        return self.start + frac * (self.end - self.start)


# --------------------------------------------------------------------------- policies

class Policy:
    """Base class: a step counter that drives annealed parameters, and numpy state.

    Subclasses implement ``select(values, mask, rng)``.

    Example:
        >>> p = GreedyQPolicy(); p.step(3); p.state_dict()["steps"].item()
        3
    """

    def __init__(self):
        self.steps = 0

    def select(self, values: np.ndarray, mask: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def step(self, n: int = 1) -> None:
        """Advance annealing schedules by ``n`` agent steps."""
        self.steps += int(n)

    def metrics(self) -> dict[str, float]:
        """Current values of the annealed parameters (for logging)."""
        return {}

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"steps": np.asarray(self.steps, np.int64)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(np.asarray(state["steps"]))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v:.4g}" for k, v in self.metrics().items())
        return f"{type(self).__name__}({params})"


class GreedyQPolicy(Policy):
    """Always the best legal action.

    Example:
        >>> GreedyQPolicy().select(np.array([[1., 5., 2.]]), np.array([[True, False, True]]),
        ...                        np.random.default_rng(0)).tolist()
        [2]
    """

    def select(self, values, mask=None, rng=None):
        return masked_argmax(values, mask)


class EpsGreedyQPolicy(Policy):
    """With probability ``eps`` a uniformly random legal action, else the best legal action.

    ``eps`` anneals linearly to ``eps_min`` over ``n_steps_annealing`` steps when ``eps_min`` is
    given (keras-rl's ``LinearAnnealedPolicy`` folded in); otherwise it stays constant.

    Example:
        >>> p = EpsGreedyQPolicy(eps=1.0, eps_min=0.05, n_steps_annealing=100)
        >>> p.step(50); round(p.eps, 3)
        0.525
        >>> p.select(np.zeros((4, 3)), np.array([[0, 0, 1]] * 4, bool), np.random.default_rng(0)).tolist()
        [2, 2, 2, 2]
    """

    def __init__(self, eps: float = 0.1, eps_min: float | None = None, n_steps_annealing: int = 10_000):
        super().__init__()
        if not 0.0 <= eps <= 1.0 or (eps_min is not None and not 0.0 <= eps_min <= 1.0):
            raise ValueError(f"eps and eps_min must be in [0, 1], got eps={eps}, eps_min={eps_min}")
        self.schedule = LinearSchedule(eps, eps_min, n_steps_annealing)

    @property
    def eps(self) -> float:
        return self.schedule.value(self.steps)

    def metrics(self):
        return {"eps": self.eps}

    def select(self, values, mask, rng):
        values, mask = check_values(values, mask)
        greedy = argmax_checked(values, mask)
        explore = rng.random(len(values)) < self.eps
        if not explore.any():
            return greedy
        rand = uniform_legal(mask, values.shape, rng)
        return np.where(explore, rand, greedy)


class SoftmaxPolicy(Policy):
    """Sample from ``softmax(values)``: ``values`` are logits (e.g. a policy network's output).

    Example:
        >>> a = SoftmaxPolicy().select(np.log([[0.2, 0.8, 0.5]]).repeat(1000, 0),
        ...                            np.array([[True, True, False]]).repeat(1000, 0), np.random.default_rng(0))
        >>> 2 not in a, bool(0.75 < a.mean() < 0.85)
        (True, True)
    """

    def select(self, values, mask, rng):
        return sample_categorical(masked_softmax(values, mask), rng)


class BoltzmannQPolicy(Policy):
    """Sample from ``softmax(clip(q / tau))``; ``tau`` may anneal to ``tau_min``.

    Example:
        >>> p = BoltzmannQPolicy(tau=1.0, tau_min=0.1, n_steps_annealing=10)
        >>> p.step(10); p.tau
        0.1
        >>> p.select(np.array([[0., 5.]]), None, np.random.default_rng(0)).tolist()
        [1]
    """

    def __init__(self, tau: float = 1.0, clip: tuple[float, float] = (-500.0, 500.0),
                 tau_min: float | None = None, n_steps_annealing: int = 10_000):
        super().__init__()
        if tau <= 0 or (tau_min is not None and tau_min <= 0):
            raise ValueError(f"tau and tau_min must be positive, got tau={tau}, tau_min={tau_min}")
        self.clip = (float(clip[0]), float(clip[1]))
        self.schedule = LinearSchedule(tau, tau_min, n_steps_annealing)

    @property
    def tau(self) -> float:
        return self.schedule.value(self.steps)

    def metrics(self):
        return {"tau": self.tau}

    def probs(self, values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """The sampling distribution ``softmax(clip(values / tau))`` over legal actions."""
        return boltzmann_probs(values, mask, self.tau, self.clip)

    def select(self, values, mask, rng):
        return sample_categorical(self.probs(values, mask), rng)


class MaxBoltzmannQPolicy(Policy):
    """With probability ``eps`` a Boltzmann sample, else the best legal action (Wiering 1999).

    ``eps`` and ``tau`` anneal to ``eps_min`` / ``tau_min`` when those are given.

    Example:
        >>> p = MaxBoltzmannQPolicy(eps=0.0)
        >>> p.select(np.array([[0., 1., 3.]]), np.array([[True, True, False]]), np.random.default_rng(0)).tolist()
        [1]
    """

    def __init__(self, eps: float = 0.1, tau: float = 1.0, clip: tuple[float, float] = (-500.0, 500.0),
                 eps_min: float | None = None, tau_min: float | None = None, n_steps_annealing: int = 10_000):
        super().__init__()
        if not 0.0 <= eps <= 1.0 or (eps_min is not None and not 0.0 <= eps_min <= 1.0):
            raise ValueError(f"eps and eps_min must be in [0, 1], got eps={eps}, eps_min={eps_min}")
        if tau <= 0 or (tau_min is not None and tau_min <= 0):
            raise ValueError(f"tau and tau_min must be positive, got tau={tau}, tau_min={tau_min}")
        self.clip = (float(clip[0]), float(clip[1]))
        self.eps_schedule = LinearSchedule(eps, eps_min, n_steps_annealing)
        self.tau_schedule = LinearSchedule(tau, tau_min, n_steps_annealing)

    @property
    def eps(self) -> float:
        return self.eps_schedule.value(self.steps)

    @property
    def tau(self) -> float:
        return self.tau_schedule.value(self.steps)

    def metrics(self):
        return {"eps": self.eps, "tau": self.tau}

    def select(self, values, mask, rng):
        values, mask = check_values(values, mask)
        greedy = masked_argmax(values, mask)
        explore = rng.random(len(values)) < self.eps
        if not explore.any():
            return greedy
        boltzmann = sample_categorical(boltzmann_probs(values, mask, self.tau, self.clip), rng)
        return np.where(explore, boltzmann, greedy)


class BoltzmannGumbelQPolicy(Policy):
    """Boltzmann-Gumbel exploration (Cesa-Bianchi et al., 2017).

    Picks ``argmax(q + beta * Z)`` with ``Z ~ Gumbel(0, 1)`` and ``beta_a = C / sqrt(N_a)``, where
    ``N_a`` counts how often action ``a`` was chosen (by this policy, over all states; starts at
    1). Within one batch all rows use the counts from before the batch. Only meant for exploring;
    the counts are part of ``state_dict()``.

    Example:
        >>> p = BoltzmannGumbelQPolicy(C=1.0)
        >>> a = p.select(np.zeros((3, 2)), np.array([[True, False]] * 3), np.random.default_rng(0))
        >>> a.tolist(), p.action_counts.tolist()
        ([0, 0, 0], [4.0, 1.0])
    """

    def __init__(self, C: float = 1.0):
        super().__init__()
        if C < 0:
            raise ValueError(f"C must be non-negative, got {C}")
        self.C = float(C)
        self.action_counts: np.ndarray | None = None

    def select(self, values, mask, rng):
        values, mask = check_values(values, mask)
        n = values.shape[1]
        if self.action_counts is None or len(self.action_counts) != n:
            self.action_counts = np.ones(n, np.float64)
        beta = self.C / np.sqrt(self.action_counts)
        perturbed = values.astype(np.float64) + beta * gumbel_noise(rng, values.shape)
        actions = masked_argmax(perturbed, mask)
        self.action_counts += np.bincount(actions, minlength=n)
        return actions

    def state_dict(self):
        state = super().state_dict()
        if self.action_counts is not None:
            state["action_counts"] = self.action_counts.copy()
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        counts = state.get("action_counts")
        self.action_counts = None if counts is None else np.array(counts, np.float64)


class GumbelSoftmaxPolicy(Policy):
    """Gumbel-max sampling from logits, plus the relaxed (Gumbel-softmax) sample for MADDPG.

    ``select`` returns ``argmax(logits + g)`` with Gumbel noise ``g``: exactly a sample from
    ``softmax(logits)`` and the hard counterpart of ``probs(..., rng=rng)``, whose argmax it is
    (the temperature changes only the relaxed probabilities, never their argmax). The temperature
    may anneal to ``temperature_min``.

    Example:
        >>> p = GumbelSoftmaxPolicy(temperature=0.5)
        >>> p.probs(np.array([[0., 0., 9.]]), np.array([[True, True, False]])).round(2).tolist()
        [[0.5, 0.5, 0.0]]
        >>> p.select(np.array([[0., -50., 9.]]), np.array([[True, True, False]]), np.random.default_rng(0)).tolist()
        [0]
    """

    def __init__(self, temperature: float = 1.0, temperature_min: float | None = None,
                 n_steps_annealing: int = 10_000):
        super().__init__()
        if temperature <= 0 or (temperature_min is not None and temperature_min <= 0):
            raise ValueError(f"temperatures must be positive, got {temperature}, {temperature_min}")
        self.schedule = LinearSchedule(temperature, temperature_min, n_steps_annealing)

    @property
    def temperature(self) -> float:
        return self.schedule.value(self.steps)

    def metrics(self):
        return {"temperature": self.temperature}

    def probs(self, logits: np.ndarray, mask: np.ndarray | None = None, temperature: float | None = None,
              rng: np.random.Generator | None = None) -> np.ndarray:
        """``softmax((logits + g) / temperature)`` with ``g`` Gumbel noise when ``rng`` is given
        (a relaxed one-hot sample), else the plain ``softmax(logits / temperature)``; illegal
        entries get probability 0. ``temperature=None`` uses the policy's current temperature."""
        logits, mask = check_values(logits, mask)
        t = self.temperature if temperature is None else float(temperature)
        if t <= 0:
            raise ValueError(f"temperature must be positive, got {t}")
        z = logits.astype(np.float64)
        if rng is not None:
            z = z + gumbel_noise(rng, z.shape)
        return masked_softmax(z / t, mask)

    def select(self, values, mask, rng):
        values, mask = check_values(values, mask)
        return masked_argmax(values.astype(np.float64) + gumbel_noise(rng, values.shape), mask)
