"""``agent.train(...)``: the original library's one-agent training call over DecentralizedTrainer.

One loop trains everything: :func:`train_agent` builds (or reuses) a
:class:`~marl_note.trainers.DecentralizedTrainer` on the agent's env with the agent in its seat(s)
and calls its ``train``. The original arguments map as follows:

=============== ============================================================================
argument        maps to
=============== ============================================================================
episodes        ``episodes_per_train`` (training episodes of this call)
env             the env (a Gymnasium id, a Gymnasium or PettingZoo env or env factory, a
                PettingZoo module); remembered as ``agent.env``: a later call without env,
                or with the same one and no new settings, reuses the trainer. One seat:
                the agent plays it; several seats: MADDPG plays each agent's seat, any other
                agent plays every seat (self-play).
pool_network    True: the envs run in worker processes (needs ``processes``); with any of
                the shard options below, ``processes=N`` actor processes collect into
                shared-memory shards while the learner trains (``actors=N``,
                :mod:`marl_note.contrib.pool`)
processes       ``processes=N`` worker processes hosting the envs (one env per worker
                unless ``num_train_envs`` is given)
window_size,    the pool's shard options (:class:`~marl_note.contrib.pool.options.PoolOptions`):
clearing_freq,  ``window_size`` rows evicted from a full shard (or a callable), every
window_size_,   ``clearing_freq`` rounds the oldest ``window_size_`` rows evicted, ``random``
random,         writes balanced over the shards, ``num_store`` episodes per actor round;
num_store       they need ``pool_network=True, processes=N``
jit_compile     the built-in agents' ``compile`` option (XLA in TensorFlow, torch.compile);
                an RL subclass refuses True (it compiles its own networks)
callbacks       the trainer's callbacks, after the ones built from the agent's attributes
p               the number of progress reports printed over the run (default 10, 0: none)
=============== ============================================================================

From the agent: ``run_options["batch"]`` is the trainer's ``batch_size``; ``trial_count`` +
``criterion`` and ``agent.patience`` become
``marl_note.trainers.callbacks.EarlyStopping(trial_count, criterion, patience)``; ``agent.path``
and the other saving attributes become
``marl_note.trainers.checkpointing.CheckpointManager(path, save_freq, max_save_files,
save_param_only, save_best_only, save_top_k, save_last)`` (see :func:`run_callbacks`). Any other
keyword is one of the trainer's own settings (``num_train_envs``, ``test_freq``, ``seed``, ...,
``plot``, ``checkpoint_path``, ...); the defaults here: one train env (or one per worker
process), an update round every 16 vector steps, a test of 5 greedy episodes (on 5 envs side by
side) after every fifth of the run, no plot.
"""
from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.compat.animate import Animation, animate_agent
from marl_note.compat.visualize import visualize_loss, visualize_reward, visualize_reward_loss
from marl_note.trainers.callbacks import EarlyStopping
from marl_note.trainers.checkpointing import CheckpointManager
from marl_note.trainers.seats import positive_int
from marl_note.trainers.trainer import DecentralizedTrainer

__all__ = ["train_agent", "run_callbacks", "visualize", "animate", "ProgressReport"]

_OWN = {"self", "env", "episodes_per_train", "processes", "batch_size", "agents", "learning_mask", "callbacks",
        "progress"}
_TRAINER_OPTIONS = set(inspect.signature(DecentralizedTrainer.__init__).parameters) - _OWN
_TRAIN_OPTIONS = set(inspect.signature(DecentralizedTrainer.train).parameters) - _OWN
_SAVE_ATTRS = ("save_freq", "max_save_files", "save_param_only", "save_best_only", "save_top_k", "save_last")


class _Copies:
    """An env factory from an env instance: a deep copy per call (the trainer builds one env per slot)."""

    def __init__(self, env: Any):
        self.env = env

    def __call__(self) -> Any:
        return copy.deepcopy(self.env)


def env_source(env: Any) -> Any:
    """What DecentralizedTrainer takes for ``env``: ids, factories and modules as given, instances via copies.

    Example:
        >>> import gymnasium as gym
        >>> env_source(gym.make("CartPole-v1"))().spec.id
        'CartPole-v1'
    """
    from pettingzoo import AECEnv, ParallelEnv

    if isinstance(env, gym.Env):
        return functools.partial(gym.make, env.spec) if env.spec is not None else _Copies(env)
    if isinstance(env, (AECEnv, ParallelEnv)):
        return _Copies(env)
    return env


class ProgressReport:
    """Prints ``reports`` progress lines over a run of ``episodes`` training episodes (the original ``p``).

    Each line: the training episodes so far, the mean training return over the last
    ``trial_count`` episodes (or over those since the previous line) and the last losses.

    Example:
        >>> report = ProgressReport(episodes=10, reports=2)
        >>> from marl_note.trainers.collector import CollectStats
        >>> report.on_collect_end(None, CollectStats(episodes=5, returns=[np.array([1.0])] * 5), 5)
        episode: 5   average reward: 1.0000
    """

    def __init__(self, episodes: int, reports: int, trial_count: int | None = None):
        self.every = max(1, episodes // max(1, reports))
        self.trial_count = trial_count
        self.next = self.every
        self.returns: list[float] = []
        self.since = 0
        self.losses: dict[str, float] = {}

    def on_update_end(self, trainer: Any, metrics: dict[str, Any], episodes: int) -> None:
        self.losses.update({k: float(v) for k, v in metrics.items()
                            if k.endswith("loss") and isinstance(v, (int, float, np.number))})

    def on_collect_end(self, trainer: Any, stats: Any, episodes: int) -> None:
        self.returns += [float(np.mean(r)) for r in stats.returns]
        self.since += stats.episodes
        if episodes < self.next or not self.returns:
            return
        window = self.trial_count or max(1, self.since)
        line = f"episode: {episodes}   average reward: {np.mean(self.returns[-window:]):.4f}"
        line += "".join(f"   {k}: {v:.4f}" for k, v in self.losses.items())
        print(line)
        self.returns, self.since = self.returns[-window:], 0
        self.next = (episodes // self.every + 1) * self.every

    def on_train_end(self, trainer: Any, stats: dict[str, Any]) -> None:
        print(f"time: {stats['training_time']:.1f}s")


def run_callbacks(agent: Any) -> list[Any]:
    """The callbacks the agent's original attributes ask for: early stopping and checkpointing.

    ``criterion`` (with ``trial_count``) or ``agent.patience``: ``EarlyStopping(trial_count, criterion,
    patience)``; ``agent.path``: ``CheckpointManager(path, save_freq, max_save_files, save_param_only,
    save_best_only, save_top_k, save_last)``. A saving attribute set without ``path`` is an error.

    Example:
        >>> import gymnasium as gym
        >>> from marl_note.compat.torch import DQN
        >>> run_callbacks(DQN(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), hidden_sizes=(4,)))
        []
    """
    out: list[Any] = []
    opts = agent.run_options
    criterion, patience = opts.get("criterion"), agent.patience
    if criterion is not None or patience is not None:
        out.append(EarlyStopping(trial_count=opts.get("trial_count") if criterion is not None else None,
                                 criterion=criterion, patience=patience))
    saving = {name: getattr(agent, name) for name in _SAVE_ATTRS}
    if agent.path is not None:
        out.append(CheckpointManager(agent.path, **saving))
    else:
        set_here = [name for name in _SAVE_ATTRS if saving[name] != getattr(type(agent), name)]
        if set_here:
            raise ValueError(f"agent.{set_here[0]} is set but agent.path is not: set agent.path to where the "
                             f"checkpoints go")
    return out


def _split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    unknown = sorted(set(options) - _TRAINER_OPTIONS - _TRAIN_OPTIONS)
    if unknown:
        raise TypeError(f"train() got unexpected arguments {unknown}; besides the original ones it takes the "
                        f"trainer's settings {sorted(_TRAINER_OPTIONS | _TRAIN_OPTIONS)}")
    return ({k: v for k, v in options.items() if k in _TRAINER_OPTIONS},
            {k: v for k, v in options.items() if k in _TRAIN_OPTIONS})


def _trainer(agent: Any, env: Any, processes: int | None, settings: dict[str, Any]) -> DecentralizedTrainer:
    """The last call's trainer when the env is the same one and no other settings are given, else a new one."""
    cached = agent.__dict__.get("_facade")
    if cached is not None and cached[0] is env:
        last_processes, last_settings = cached[1]
        if processes in (None, last_processes) and (not settings or settings == last_settings):
            return cached[2]
    envs = settings.get("num_train_envs", processes or 1)
    defaults = {"num_train_envs": envs, "num_test_envs": 5, "episodes_per_test": 5, "update_freq": 16 * envs}
    trainer = DecentralizedTrainer(env_source(env), processes=processes, **{**defaults, **settings})
    agent.__dict__["_facade"] = (env, (processes, dict(settings)), trainer)
    return trainer


def _seats(agent: Any, trainer: DecentralizedTrainer) -> list[Any]:
    names = trainer.possible_agents
    if callable(getattr(agent, "seat_agents", None)):  # MADDPG: one actor per env agent
        if set(agent.agents) != set(names):
            raise ValueError(f"{type(agent).__name__} was built for the agents {list(agent.agents)}, the env has "
                             f"{list(names)}")
        by_name = {seat.agent_id: seat for seat in agent.seat_agents()}
        return [by_name[a] for a in names]
    return [agent] * len(names)  # one seat, or self-play in every seat


def train_agent(agent: Any, episodes: int, env: Any = None, pool_network: bool = False, processes: int | None = None,
                window_size: Any = None, clearing_freq: int | None = None, jit_compile: bool | None = None,
                callbacks: Sequence[Any] | None = None, p: int | None = None, window_size_: int | None = None,
                random: bool = False, num_store: int | None = None, **options: Any) -> dict[str, Any]:
    """``agent.train(...)``; see the module docstring for the arguments. Returns the trainer's statistics.

    Example:
        >>> from marl_note.compat.torch import DQN
        >>> env = gym.make("CartPole-v1")
        >>> agent = DQN(env.observation_space, env.action_space, learning_starts=32, seed=0)
        >>> stats = agent.train(4, env="CartPole-v1", p=0, seed=0)
        >>> stats["num_collected_episodes"] >= 4, agent.env
        (True, 'CartPole-v1')
    """
    from marl_note.compat.train_bindings import bind_env, set_compile

    episodes = positive_int("episodes", episodes)
    shard = {k: v for k, v in (("window_size", window_size), ("clearing_freq", clearing_freq),
                                ("window_size_", window_size_), ("num_store", num_store)) if v is not None}
    if random:
        shard["random"] = random
    if shard and not (pool_network and processes is not None):
        raise ValueError(f"train({', '.join(f'{k}=...' for k in shard)}) shapes the per-actor replay shards of the "
                         f"pool network: give pool_network=True, processes=N (N actor processes)")
    if pool_network and processes is None:
        raise ValueError("train(pool_network=True) runs the envs in worker processes: give processes=N")
    if processes is not None:
        processes = positive_int("processes", processes)
    if shard:  # the actor-learner pool: processes=N actors, each filling its own shard
        from marl_note.contrib.pool import ActorPool

        assert processes is not None  # checked above: shard options need processes=N
        options = {**options, "source": ActorPool(processes, **shard),
                   "num_train_envs": options.get("num_train_envs", processes)}
        processes = None
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 0):
        raise ValueError(f"p must be the number of progress reports (0: none), got {p!r}")
    if isinstance(callbacks, (str, bytes)) or (callbacks is not None and not isinstance(callbacks, Sequence)):
        raise TypeError(f"callbacks must be a list of callback objects, got {type(callbacks).__name__}")
    env = agent.env if env is None else env
    if env is None:
        raise ValueError(f"{type(agent).__name__}.train() needs an env: train(episodes, env='CartPole-v1') (a "
                         f"Gymnasium id, an env or env factory, a PettingZoo module); later calls reuse it")
    settings, train_options = _split_options(options)
    batch = agent.run_options.get("batch")
    own = [*run_callbacks(agent)]
    if p != 0:
        own.append(ProgressReport(episodes, 10 if p is None else int(p), agent.run_options.get("trial_count")))
    trainer = _trainer(agent, env, processes, settings)
    set_compile(agent, jit_compile)
    bind_env(agent, env)
    agent.env = env
    trainer.episodes_per_train = episodes
    if batch is not None:
        trainer.batch_size = batch
    if "test_freq" not in settings:
        trainer.test_freq = max(1, episodes // 5)
    seats = _seats(agent, trainer)
    train_options.setdefault("plot", False)
    try:
        stats = trainer.train(seats, learning_mask=[1] * len(seats), progress=False,
                              callbacks=[*own, *(callbacks or ())], **train_options)
    finally:
        trainer.close()  # worker processes end with the call; the trainer (and its history) is kept
    return stats


def _last_run(agent: Any) -> Any:
    cached = agent.__dict__.get("_facade")
    run = cached[2].run_state if cached is not None else None
    if run is None:
        raise RuntimeError(f"{type(agent).__name__} has no training run to show yet: call agent.train(...) first")
    return run


def visualize(agent: Any, kind: str, path: str | None = None) -> str:
    """``agent.visualize_<kind>()``: the plot of the last ``train()`` run (:mod:`marl_note.trainers.plot`)."""
    draw = {"reward": visualize_reward, "loss": visualize_loss, "reward_loss": visualize_reward_loss}[kind]
    return draw(_last_run(agent), path=path)


def animate(agent: Any, max_steps: int, path: str | None = None, fps: float | None = None,
            seed: int | None = None) -> Animation:
    """``agent.animate_agent(max_steps, path=...)``: one greedy episode on the agent's env
    (:func:`marl_note.compat.animate.animate_agent`)."""
    if agent.env is None:
        raise ValueError("animate_agent() plays the agent's env: call agent.train(..., env=...) first or set agent.env")
    trainer = _trainer(agent, agent.env, None, {})
    return animate_agent(agent.env, _seats(agent, trainer), max_steps=max_steps, path=path,
                         fps=30 if fps is None else fps, seed=seed)
