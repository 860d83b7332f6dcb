"""What each of the original ``set()`` arguments means for each agent, or why it is refused.

=============== ============================================================================
argument        maps to
=============== ============================================================================
policy          DQN / RL (Discrete): the exploration policy. PPO (Discrete): only
                ``SoftmaxPolicy()`` (what PPO does: sample its categorical policy). MADDPG:
                ``SoftmaxPolicy()`` (its Gumbel-max sampling) or a constant
                ``GumbelSoftmaxPolicy(t)`` (``temperature=t``). Refused by DDPG, SAC.
noise           DDPG / RL (Box): the exploration noise process. MADDPG: a copy for every Box
                agent (or a ``{agent: process}`` dict). Refused by DQN, PPO, SAC.
pool_size       the replay capacity ``buffer_size``; PPO: the rollout length ``n_steps``
                when ``update_steps`` is not given, else it must hold ``update_steps``.
batch           the trainer's batch size (``run_options``; PPO: its minibatch size).
num_updates     gradient steps per update call: ``update_steps`` of DQN, DDPG, SAC, MADDPG,
                RL. Refused by PPO (``n_epochs``).
num_steps       n-step returns (``num_steps``) of DQN, DDPG, SAC, RL. Refused by PPO (GAE) and
                MADDPG.
update_batches  the target period in gradient steps: DQN ``target_update``; RL
                ``update_param_batches``. Refused by PPO, DDPG, SAC, MADDPG (targets follow
                by ``tau`` after every gradient step).
update_steps    the original ``update_param()`` period in env steps: DQN
                ``target_update_agent_steps``, RL ``update_param_steps``; PPO: the rollout
                length ``n_steps``. Refused by DDPG, SAC, MADDPG (``tau``).
trial_count     ``run_options``: the mean training return over that many episodes (printed
                by ``train()``, and the early-stopping window with ``criterion``).
criterion       ``run_options``: stop once that mean reaches it (needs ``trial_count``).
PPO             True: accepted by PPO only (others: use PPO). False: refused by PPO.
HER             hindsight replay ``her=dict(strategy="future", k=4)`` of DQN, DDPG, SAC on
                goal envs; ``compute_reward`` comes from the agent's env (now, or at
                ``train()``). Refused by PPO, MADDPG, RL.
TRL             RL: triplet replay (``TRL=True``). Refused by the built-in agents.
MARL            MADDPG: ``centralized_critic``. Refused by the others (True).
PR              prioritized replay (``prioritized``) of DQN, DDPG, SAC, PPO, RL. Refused by
                MADDPG.
IRL             RL: ``action(s)`` returns ``(output, aux)``. Refused by the built-in agents.
alpha           the prioritization exponent (with PR).
initial_TD      the priority of new transitions, ``initial_td`` (with PR).
lambda_         PPO with PR: the weight of ``|TD|`` against ``|ratio - 1|`` in the priority.
initial_ratio   PPO with PR: the initial ``|ratio - 1|`` part of the priority.
=============== ============================================================================

Which algorithm an agent is comes from :mod:`marl_note.agents.registry` (:func:`registry.entry_of
<marl_note.agents.registry.entry_of>`: the entry of its most derived registered class). Another
registered algorithm (a plugin's, or AlphaZero) takes the options of an off-policy replay agent
(``pool_size``, ``num_updates``, ``num_steps``, HER, PR), as a user subclass of DQN takes DQN's.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_note.agents import registry
from marl_note.agents.checkpoints.restoring import backend_of
from marl_note.compat.rebuild import rebuild
from marl_note.compat.train_bindings import compute_reward_of
from marl_note.replay.feed import is_goal_space

__all__ = ["apply_set"]

_FLAGS = ("PPO", "HER", "TRL", "MARL", "PR", "IRL")
_COUNTS = ("pool_size", "batch", "num_updates", "num_steps", "update_batches", "update_steps", "trial_count")
_RUN = ("batch", "trial_count", "criterion")
_DEFAULT_HER = {"strategy": "future", "k": 4}
# the original set() names of the prioritized-replay options -> the constructors' (lowercase) names
_PRIORITY = {"PR": "prioritized", "alpha": "alpha", "initial_TD": "initial_td"}


class _Refused(ValueError):
    pass


def _refuse(name: str, why: str) -> None:
    raise _Refused(f"set({name}=...): {why}")


def _check_types(given: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(given)
    for name in _FLAGS:
        if name in out and not isinstance(out[name], (bool, np.bool_)):
            raise TypeError(f"set({name}=...) takes True or False, got {out[name]!r}")
    for name in _COUNTS:
        v = out.get(name)
        if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1):
            raise ValueError(f"set({name}=...) must be a positive integer, got {v!r}")
    c = out.get("criterion")
    if c is not None and (isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.integer, np.floating))
                          or not math.isfinite(c)):
        raise ValueError(f"set(criterion=...) must be a finite number (the mean return to stop at), got {c!r}")
    return out


def apply_set(agent: Any, given: Mapping[str, Any]) -> None:
    """``agent.set(**given)``: check everything, then rebuild or reconfigure the agent, keep run options."""
    from marl_note.compat.rl import RLCore

    opts = _check_types(given)
    run = {k: opts.pop(k) for k in _RUN if k in opts}
    if "criterion" in run and run.get("trial_count", agent.run_options.get("trial_count")) is None:
        raise ValueError("set(criterion=...) needs trial_count: the number of training episodes whose mean return "
                         "is compared with criterion")
    if isinstance(agent, RLCore):
        changes = _rl(agent, opts)
        if changes:
            agent.reconfigure(**changes)
    else:
        changes, fresh, her = _builtin(agent, opts)
        pending = agent.__dict__.get("_her_pending")
        if changes.get("her") and "compute_reward" not in changes:
            reward = compute_reward_of(agent.env) if agent.env is not None else None
            if reward is None:  # HER is switched on by train(), which knows the env
                pending = changes.pop("her")
            else:
                changes["compute_reward"] = reward
        elif her is False:
            pending = None
        if changes:
            _rebuild(agent, changes, fresh)
        if pending is None:
            agent.__dict__.pop("_her_pending", None)
        else:
            agent.__dict__["_her_pending"] = pending
    agent.run_options.update(run)


def _rebuild(agent: Any, changes: dict[str, Any], fresh: tuple[str, ...]) -> None:
    if changes.pop("_new_networks", False):
        if agent.updates or agent.agent_steps:
            raise ValueError(f"this change alters {type(agent).__name__}'s network shapes, so the trained weights "
                             f"cannot be kept; build a new agent with it instead")
        rebuild(agent, changes, keep_state=False)
    else:
        rebuild(agent, changes, fresh_state=fresh)


# --------------------------------------------------------------------------- the built-in agents

def _builtin(agent: Any, o: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...], bool | None]:
    """Constructor changes, state prefixes to take fresh, and the HER flag given (None: not given)."""
    algo = _algorithm(agent)
    pr = o.get("PR", agent.config.get("prioritized", False))
    _refusals(agent, o, pr)
    changes: dict[str, Any] = {}
    fresh: tuple[str, ...] = ()
    for key, name in _PRIORITY.items():
        if key in o:
            changes[name] = o[key]
    if algo == "ppo":
        fresh = _ppo(agent, o, changes, pr)
    elif algo == "maddpg":
        fresh = _maddpg(agent, o, changes)
    else:
        _off_policy(agent, o, changes)
        if algo == "dqn":
            fresh = _dqn(agent, o, changes)
        elif algo == "ddpg":
            fresh = _explore_box(agent, o, changes)
        elif algo == "sac":
            for key in ("policy", "noise"):
                if key in o:
                    _refuse(key, "SAC explores by sampling its own stochastic policy (entropy-regularised); tune "
                                 "init_temperature, autotune or target_entropy instead")
        _no_target_period(agent, o, algo == "dqn")
    return changes, fresh, o.get("HER")


def _algorithm(agent: Any) -> str | None:
    """The registered name of ``agent``'s algorithm (None: none of its classes is registered)."""
    entry = registry.entry_of(agent)
    return None if entry is None else entry.name


def _refusals(agent: Any, o: dict[str, Any], pr: bool) -> None:
    """The arguments no built-in agent of this kind has machinery for."""
    algo = _algorithm(agent)
    name, backend, cfg = type(agent).__name__, backend_of(type(agent)), agent.config
    use = f"marl_note.compat.{backend}"
    if o.get("TRL"):
        _refuse("TRL", f"triplet replay feeds a loss with ordered step triplets of one episode; {name}'s loss "
                       f"trains on single transitions: subclass {use}.RL and set(TRL=True)")
    if o.get("IRL"):
        _refuse("IRL", f"IRL needs a network with an auxiliary output next to the policy output; {name}'s networks "
                       f"have none: subclass {use}.RL and return (output, aux) from action()")
    if o.get("MARL") and algo != "maddpg":
        _refuse("MARL", f"MARL=True is the centralised critic of {use}.MADDPG; train() already puts this {name} in "
                        f"every seat of a multi-agent env (independent learners)")
    if o.get("PPO") and algo != "ppo":
        _refuse("PPO", f"{name} is not PPO: use {use}.PPO")
    if o.get("PPO") is False and algo == "ppo":
        _refuse("PPO", f"this agent is PPO; for an off-policy learner use {use}.DQN, DDPG or SAC")
    for key in ("alpha", "initial_TD"):
        if key in o and algo == "maddpg":
            _refuse(key, f"{key} is an option of prioritized replay, and MADDPG's joint replay samples uniformly")
        if key in o and not pr:
            _refuse(key, f"{key} is an option of prioritized replay: pass PR=True too")
    if o.get("PR") and (cfg.get("her") or agent.__dict__.get("_her_pending")) and o.get("HER") is not False:
        _refuse("PR", "prioritized replay cannot be combined with hindsight replay (HER): pass HER=False too")
    for key in ("lambda_", "initial_ratio"):
        if key in o and algo != "ppo":
            _refuse(key, f"{key} weighs PPO's prioritized rollout (|TD| against |ratio - 1|); {name} has no ratio: "
                         f"use {use}.PPO with PR=True")


def _off_policy(agent: Any, o: dict[str, Any], changes: dict[str, Any]) -> None:
    """pool_size, num_updates, num_steps and HER of DQN, DDPG and SAC."""
    cfg = agent.config
    if "pool_size" in o:
        changes["buffer_size"] = o["pool_size"]
    if "num_updates" in o:
        changes["update_steps"] = o["num_updates"]
    if "num_steps" in o:
        changes["num_steps"] = o["num_steps"]
    if o.get("HER"):
        if not is_goal_space(agent.observation_space):
            _refuse("HER", f"hindsight replay relabels goals: it needs a goal env (a Dict observation space with "
                           f"observation / achieved_goal / desired_goal); this agent observes "
                           f"{agent.observation_space}")
        if changes.get("prioritized", cfg.get("prioritized")):
            _refuse("HER", "hindsight replay cannot be combined with prioritized replay (PR)")
        if changes.get("num_steps", cfg.get("num_steps", 1)) > 1:
            _refuse("HER", "hindsight replay cannot be combined with n-step returns (num_steps > 1)")
        changes["her"] = cfg.get("her") or dict(_DEFAULT_HER)
        if cfg.get("compute_reward") is not None:
            changes["compute_reward"] = cfg["compute_reward"]
    elif o.get("HER") is False:
        changes["her"] = None


def _no_target_period(agent: Any, o: dict[str, Any], dqn: bool) -> None:
    if dqn:
        return
    for key in ("update_batches", "update_steps"):
        if key in o:
            _refuse(key, f"{type(agent).__name__}'s target networks follow by tau after every gradient step, there "
                         f"is no target period: set tau when building the agent (gradient steps per update call: "
                         f"num_updates)")


def _dqn(agent: Any, o: dict[str, Any], changes: dict[str, Any]) -> tuple[str, ...]:
    if "noise" in o:
        _refuse("noise", "DQN has Discrete actions and explores with policy= (e.g. EpsGreedyQPolicy(0.01))")
    if "update_batches" in o and "update_steps" in o:
        _refuse("update_steps", "give the target period once: update_batches (gradient steps) or update_steps "
                                "(env steps)")
    if ("update_batches" in o or "update_steps" in o) and agent.cfg.tau is not None:
        _refuse("update_batches" if "update_batches" in o else "update_steps",
                f"this DQN follows its target by tau={agent.cfg.tau} after every gradient step; a target period "
                f"needs a DQN built with tau=None")
    if "update_batches" in o:
        changes.update(target_update=o["update_batches"], target_update_agent_steps=None)
    if "update_steps" in o:
        changes["target_update_agent_steps"] = o["update_steps"]
    if "policy" in o:
        changes["policy"] = o["policy"]
        return ("policy.",)
    return ()


def _explore_box(agent: Any, o: dict[str, Any], changes: dict[str, Any]) -> tuple[str, ...]:
    name = type(agent).__name__
    if "policy" in o:
        _refuse("policy", f"{name} has Box actions and explores with noise= (e.g. GaussianWhiteNoiseProcess)")
    if "noise" in o:
        changes["noise"] = o["noise"]
        return ("noise.",)
    return ()


def _ppo(agent: Any, o: dict[str, Any], changes: dict[str, Any], pr: bool) -> tuple[str, ...]:
    from marl_note.agents.exploration.policies import SoftmaxPolicy

    if "policy" in o and (agent.continuous or type(o["policy"]) is not SoftmaxPolicy):
        _refuse("policy", "PPO samples its actions from its own policy (a categorical over the logits, i.e. "
                          "SoftmaxPolicy(), or a Gaussian for Box actions); another exploration policy would break "
                          "its on-policy ratio")
    if "noise" in o:
        _refuse("noise", "PPO explores with its own policy (a Gaussian with learned log std for Box actions: "
                         "log_std_init), not with added noise")
    for key, why in (("num_updates", "PPO runs n_epochs passes of minibatches over each rollout: use "
                                     "PPO(n_epochs=...)"),
                     ("update_batches", "PPO runs n_epochs passes of minibatches over each rollout: use "
                                        "PPO(n_epochs=...)"),
                     ("num_steps", "PPO's returns are GAE(lambda) over the rollout: use PPO(gae_lambda=...)"),
                     ("HER", "hindsight replay relabels stored transitions; PPO learns on-policy from its rollout: "
                             "use DDPG, SAC or DQN with HER=True")):
        if o.get(key):
            _refuse(key, why)
    for key in ("lambda_", "initial_ratio"):
        if key in o:
            if not pr:
                _refuse(key, f"{key} is an option of PPO's prioritized rollout: pass PR=True too")
            changes[key] = o[key]
    if "update_steps" in o:
        changes["n_steps"] = o["update_steps"]
        if "pool_size" in o and o["pool_size"] < o["update_steps"]:
            _refuse("pool_size", f"PPO's rollout of update_steps={o['update_steps']} transitions does not fit in "
                                 f"pool_size={o['pool_size']}")
    elif "pool_size" in o:
        changes["n_steps"] = o["pool_size"]
    return ()


def _maddpg(agent: Any, o: dict[str, Any], changes: dict[str, Any]) -> tuple[str, ...]:
    from marl_note.agents.exploration.policies import GumbelSoftmaxPolicy, SoftmaxPolicy

    for key, why in (("PR", "MADDPG's joint replay samples uniformly; prioritized replay is for DQN, DDPG, SAC and "
                            "PPO"),
                     ("num_steps", "MADDPG's joint replay stores one-step rows; n-step returns are for DQN, DDPG "
                                   "and SAC"),
                     ("HER", "hindsight replay needs a single-agent goal env: use DDPG, SAC or DQN"),
                     ("update_batches", "MADDPG's targets follow by tau after every gradient step: set tau"),
                     ("update_steps", "MADDPG's targets follow by tau after every gradient step: set tau")):
        if key in o and o[key] is not False:
            _refuse(key, why)
    for name in _PRIORITY.values():
        changes.pop(name, None)
    fresh: list[str] = []
    discrete = [a for a in agent.agents if agent.discrete[a]]
    boxes = [a for a in agent.agents if not agent.discrete[a]]
    if "pool_size" in o:
        changes["buffer_size"] = o["pool_size"]
    if "num_updates" in o:
        changes["update_steps"] = o["num_updates"]
    if "MARL" in o and bool(o["MARL"]) != agent.centralized_critic:
        changes.update(centralized_critic=o["MARL"], _new_networks=True)
    if "policy" in o:
        p = o["policy"]
        if not discrete:
            _refuse("policy", "every MADDPG agent here has Box actions: explore with noise=")
        if type(p) is GumbelSoftmaxPolicy and p.schedule.end == p.schedule.start:
            changes["temperature"] = p.temperature
            fresh += [f"{a}.policy." for a in discrete]
        elif type(p) is not SoftmaxPolicy:
            _refuse("policy", "MADDPG samples its Discrete actions from softmax(logits) (Gumbel-max): pass "
                              "SoftmaxPolicy() or GumbelSoftmaxPolicy(temperature) with a constant temperature "
                              "(MADDPG(temperature=...))")
    if "noise" in o:
        if not boxes:
            _refuse("noise", "every MADDPG agent here has Discrete actions: explore with policy=")
        noise = o["noise"]
        changes["noise"] = (dict(noise) if isinstance(noise, Mapping)
                            else {a: copy.deepcopy(noise) for a in boxes})
        fresh += [f"{a}.noise." for a in changes["noise"]]
    return tuple(fresh)


# --------------------------------------------------------------------------- RL subclasses

def _rl(agent: Any, o: dict[str, Any]) -> dict[str, Any]:
    """:meth:`RLCore.reconfigure` arguments for an RL subclass."""
    use = f"marl_note.compat.{backend_of(type(agent))}"
    for key, why in (("HER", f"hindsight replay of goal envs is built into {use}.DDPG, SAC and DQN (HER=True)"),
                     ("PPO", f"PPO is built in: {use}.PPO (an RL subclass learns from replay)"),
                     ("MARL", f"MARL=True is the centralised critic of {use}.MADDPG"),
                     ("lambda_", f"lambda_ weighs PPO's prioritized rollout: {use}.PPO with PR=True"),
                     ("initial_ratio", f"initial_ratio belongs to PPO's prioritized rollout: {use}.PPO with PR=True")):
        if key in o and (o[key] is not False):
            _refuse(key, why)
    if "update_batches" in o and "update_steps" in o:
        _refuse("update_steps", "give the update_param() period once: update_batches (gradient steps) or "
                                "update_steps (env steps)")
    pr = o.get("PR", agent.cfg.prioritized)
    for key in ("alpha", "initial_TD"):
        if key in o and not pr:
            _refuse(key, f"{key} is an option of prioritized replay: pass PR=True too")
    names = {"pool_size": "buffer_size", "num_updates": "update_steps", "num_steps": "num_steps", **_PRIORITY,
             "TRL": "TRL", "IRL": "IRL", "policy": "policy", "noise": "noise"}
    changes = {names[k]: v for k, v in o.items() if k in names}
    if "update_batches" in o:
        changes.update(update_param_batches=o["update_batches"], update_param_steps=None)
    if "update_steps" in o:
        changes.update(update_param_steps=o["update_steps"], update_param_batches=None)
    return changes
