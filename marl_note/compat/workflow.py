"""The original library's one-agent workflow on every agent: ``set()``, ``train()``, plots, animation.

``agent.set(...)`` takes the original library's argument names and maps each onto this library's
machinery (replay capacity, prioritized / n-step / hindsight replay, exploration, update
schedule), or refuses it with an error saying what to use instead; nothing is ignored. It works
on the agent alone (numpy, no trainer). ``agent.train(episodes, env=...)`` builds a
:class:`~marl_note.trainers.DecentralizedTrainer` with this agent in its seat(s) and trains it:
the one place where ``marl_note.agents`` reaches up into ``marl_note.trainers``, by an import
inside the method (docs/ARCHITECTURE.md, "The dependency rule"). The mapping of every argument
is in :mod:`marl_note.compat.set_options` and :mod:`marl_note.compat.facade`.

The original attributes read by ``train()``: ``patience`` (early stopping on the test metric),
``path``, ``save_freq``, ``max_save_files``, ``save_param_only``, ``save_best_only``,
``save_top_k``, ``save_last`` (checkpoints), and ``env`` (the env ``train()`` uses when given
none; ``train(env=...)`` sets it).

Example:
    >>> import gymnasium as gym
    >>> from marl_note.agents import EpsGreedyQPolicy
    >>> from marl_note.compat.torch import DQN
    >>> agent = DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    >>> agent.set(policy=EpsGreedyQPolicy(0.01), pool_size=10000, batch=64, update_steps=10) is agent
    True
    >>> agent.replay.capacity, agent.policy.eps, agent.cfg.target_update_agent_steps, agent.run_options
    (10000, 0.01, 10, {'batch': 64})
"""
from __future__ import annotations

from typing import Any

__all__ = ["Workflow"]


class Workflow:
    """Mixin of every built-in agent and of ``RL``: the original ``set`` / ``train`` / ``visualize_*``."""

    # the original attributes train() reads (see the module docstring)
    env: Any = None
    patience: int | None = None
    path: str | None = None
    save_freq: int | None = None
    max_save_files: int | None = None
    save_param_only: bool = False
    save_best_only: bool = False
    save_top_k: int | None = None
    save_last: bool = True

    @classmethod
    def load(cls, path: Any, **overrides: Any) -> Any:
        """Release 0.1.0's name of ``restore``: a new agent from a checkpoint written by ``save``."""
        restore: Any = cls.restore  # type: ignore[attr-defined]  # every class mixing this in saves (Saving)
        return restore(path, **overrides)

    @property
    def run_options(self) -> dict[str, Any]:
        """The training-run options given to ``set()``: ``batch``, ``trial_count``, ``criterion``."""
        return self.__dict__.setdefault("_run_options", {})

    def set(self, policy: Any = None, noise: Any = None, pool_size: int | None = None, batch: int | None = None,
            num_updates: int | None = None, num_steps: int | None = None, update_batches: int | None = None,
            update_steps: int | None = None, trial_count: int | None = None, criterion: float | None = None,
            PPO: bool | None = None, HER: bool | None = None, TRL: bool | None = None, MARL: bool | None = None,
            PR: bool | None = None, IRL: bool | None = None, initial_ratio: float | None = None,
            initial_TD: float | None = None, lambda_: float | None = None, alpha: float | None = None) -> Any:
        """Set options by the original library's names; returns the agent.

        Arguments left at None are unchanged (``PR=False`` turns prioritized replay off). Every
        argument is checked, and refused with a ValueError or TypeError saying what to use instead
        where this agent has no such machinery, before anything changes. Replay and exploration
        options rebuild the agent's non-network parts from its recorded ``config`` (as
        ``restore`` builds an agent), keeping its weights, optimiser state and counters; a replay
        option may change only while the replay buffer is empty. ``batch``, ``trial_count`` and
        ``criterion`` are kept in ``run_options`` for ``train()``. The mapping of each argument
        for each agent is documented in :mod:`marl_note.compat.set_options`.
        """
        from marl_note.compat.set_options import apply_set

        given = {k: v for k, v in dict(
            policy=policy, noise=noise, pool_size=pool_size, batch=batch, num_updates=num_updates,
            num_steps=num_steps, update_batches=update_batches, update_steps=update_steps, trial_count=trial_count,
            criterion=criterion, PPO=PPO, HER=HER, TRL=TRL, MARL=MARL, PR=PR, IRL=IRL, initial_ratio=initial_ratio,
            initial_TD=initial_TD, lambda_=lambda_, alpha=alpha).items() if v is not None}
        apply_set(self, given)
        return self

    def train(self, episodes: int, env: Any = None, pool_network: bool = False, processes: int | None = None,
              window_size: int | None = None, clearing_freq: int | None = None, jit_compile: bool | None = None,
              callbacks: Any = None, p: int | None = None, **options: Any) -> dict[str, Any]:
        """Train for ``episodes`` training episodes on ``env`` (default: the env of an earlier call).

        A thin layer over :class:`~marl_note.trainers.DecentralizedTrainer` (built once per env and
        reused); see :func:`marl_note.compat.facade.train_agent` for every argument and
        ``options`` (the trainer's own settings, e.g. ``test_freq``, ``seed``). Returns the
        trainer's statistics.
        """
        from marl_note.compat.facade import train_agent  # the one upward import, deferred to this call

        return train_agent(self, episodes, env=env, pool_network=pool_network, processes=processes,
                           window_size=window_size, clearing_freq=clearing_freq, jit_compile=jit_compile,
                           callbacks=callbacks, p=p, **options)

    def visualize_loss(self, path: str | None = None) -> Any:
        """Plot the loss of the last ``train()`` run (see :mod:`marl_note.trainers.plot`)."""
        from marl_note.compat.facade import visualize

        return visualize(self, "loss", path)

    def visualize_reward(self, path: str | None = None) -> Any:
        """Plot the test reward metric of the last ``train()`` run."""
        from marl_note.compat.facade import visualize

        return visualize(self, "reward", path)

    def visualize_reward_loss(self, path: str | None = None) -> Any:
        """Plot reward and loss of the last ``train()`` run in one figure."""
        from marl_note.compat.facade import visualize

        return visualize(self, "reward_loss", path)

    def animate_agent(self, max_steps: int, path: str | None = None, fps: int | None = None,
                      seed: int | None = None) -> Any:
        """Play one greedy episode of at most ``max_steps`` steps on the agent's env and write it to ``path``."""
        from marl_note.compat.facade import animate

        return animate(self, max_steps, path=path, fps=fps, seed=seed)
