"""Adaptive batch size and hyperparameters from the gradient noise scale and replay's effective sample size.

:func:`adjust` and :func:`adabatch` (the original library's names) build an
:class:`~marl_note.contrib.adaptive.callback.Adaptive` callback; pass it to ``train(callbacks=[...])``
(first in the list, so the logging callbacks after it see its values) or to ``agent.train(...,
callbacks=[...])``. The rules, their signals and directions are in
:mod:`marl_note.contrib.adaptive.rules`.

Example:
    >>> cb = adjust(target_noise=1.0, batch_params={"min": 32, "max": 256}, eps_params={"rate": 0.2})
    >>> sorted(cb.knobs), cb.batch.lr_rule
    (['eps'], 'sqrt')
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marl_note.contrib.adaptive.callback import Adaptive
from marl_note.contrib.adaptive.rules import KNOBS, BatchRule, KnobRule

__all__ = ["KNOBS", "Adaptive", "BatchRule", "KnobRule", "adabatch", "adjust"]


def adjust(target_ess: float = 0.5, target_noise: float = 1.0, num_samples: int = 512, smooth: float = 0.95,
           batch_params: Mapping[str, float] | None = None, alpha_params: Mapping[str, float] | None = None,
           eps_params: Mapping[str, float] | None = None, tau_params: Mapping[str, float] | None = None,
           gamma_params: Mapping[str, float] | None = None, clip_params: Mapping[str, float] | None = None,
           beta_params: Mapping[str, float] | None = None, update_freq_params: Mapping[str, float] | None = None,
           lr_rule: str = "sqrt", every: int = 4, agent: Any = None, seed: int | None = 0,
           window_params: Mapping[str, float] | None = None, objective: str = "time") -> Adaptive:
    """The adaptive callback for the knobs whose ``<knob>_params`` dict is given (``{}``: the defaults).

    ``target_ess`` is the set point of prioritized replay's effective sample size as a fraction of
    the stored items, ``target_noise`` that of the batch's relative gradient noise
    ``B_simple / batch_size``; ``num_samples`` rows (and ``num_samples // 8``) measure the noise
    scale every ``every`` collection chunks (a measurement costs about ``num_samples * 9 / 8`` rows
    of forward and backward passes), ``smooth`` is the estimator's moving-average weight.
    ``objective`` is the batch rule's aim: ``"time"`` the batch of least wall time to a loss given the
    noise scale and what a step costs, ``"steps"`` the batch whose noise is ``target_noise``
    (:class:`~marl_note.contrib.adaptive.rules.BatchRule`).
    ``lr_rule`` scales the learning rates with the batch size (``linear``, ``sqrt``, ``none``). A
    params dict has the keys ``rate``, ``min``, ``max``, ``smooth``, ``scale``, ``align``
    (:func:`rules.check_params`).
    ``window_params`` adapts the replay's sampling window (``window_size``: the newest items sampling
    draws from; prioritized replay only), bounded by the replay's capacity.

    Example:
        >>> adjust(tau_params={"rate": 2.0})
        Traceback (most recent call last):
        ...
        ValueError: tau_params['rate'] must be in (0, 1], got 2.0
    """
    given = {"alpha": alpha_params, "beta": beta_params, "eps": eps_params, "tau": tau_params,
             "gamma": gamma_params, "clip_range": clip_params, "update_freq": update_freq_params,
             "window_size": window_params}
    knobs = {name: KnobRule(name, params) for name, params in given.items() if params is not None}
    batch = None if batch_params is None else BatchRule(batch_params, lr_rule, objective)
    if batch is None and not knobs:
        raise ValueError("adjust() was given no <knob>_params: pass batch_params={} (or another knob's dict) "
                         "for each knob to adapt")
    return Adaptive(batch, knobs, target_noise=target_noise, target_ess=target_ess, num_samples=num_samples,
                    smooth=smooth, every=every, agent=agent, seed=seed)


def adabatch(batch_params: Mapping[str, float] | None = None, target_noise: float = 1.0, num_samples: int = 512,
             smooth: float = 0.95, lr_rule: str = "sqrt", every: int = 4, agent: Any = None,
             seed: int | None = 0, objective: str = "time") -> Adaptive:
    """Adaptive batch size only: :func:`adjust` with ``batch_params`` (default ``{}``) and no other knob.

    Example:
        >>> adabatch({"max": 1024, "align": 4}).batch.params["max"]
        1024.0
    """
    return adjust(target_noise=target_noise, num_samples=num_samples, smooth=smooth,
                  batch_params={} if batch_params is None else batch_params, lr_rule=lr_rule, every=every,
                  agent=agent, seed=seed, objective=objective)
