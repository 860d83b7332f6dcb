"""Neural Fictitious Self-Play (Heinrich & Silver, 2016), the numpy half: hyperparameters, the two
policies, the per-episode mixing, both buffers and the update schedule.

NFSP is two learners in one agent. The best response is DQN (:class:`~marl_note.agents.dqn.DQNCore`,
whose machinery it reuses: Q-networks, replay, epsilon-greedy exploration, targets); the average
policy is a softmax network trained by supervised learning (cross-entropy) on a reservoir buffer
(:class:`~marl_note.replay.reservoir.ReservoirBuffer`) of the agent's own best-response actions. At
the start of each episode, independently for each env stream, the agent plays its best response
with probability ``eta`` (the anticipatory parameter) and its average policy otherwise; only
best-response actions go to the reservoir. The average policy is what :meth:`NFSPCore.policy_probs`
returns and what ``act(explore=False)`` plays (evaluation, exploitability): in two-player zero-sum
games it is the part that approaches a Nash equilibrium.

Example:
    >>> NFSPConfig(eta=0.2).eta
    0.2
    >>> NFSPConfig(eta=1.5)
    Traceback (most recent call last):
    ...
    ValueError: eta must be in [0, 1] (the anticipatory parameter: the chance of an episode played with \
the best response), got 1.5
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.dqn import DQNConfig, DQNCore
from marl_note.agents.exploration.masked import masked_argmax, masked_softmax, sample_categorical
from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from marl_note.agents.networks import mlp_weights
from marl_note.agents.schedule import mean_metrics
from marl_note.agents.spaces import check_mask
from marl_note.replay.reservoir import ReservoirBuffer
from marl_note.validation import positive_float, positive_int, unit_interval

__all__ = ["NFSPConfig", "NFSPCore", "NFSPMemory"]

_RL, _SL = "rl.", "sl."
SAVED_MODES = 256  # envs whose current episode's policy a checkpoint keeps (others draw afresh on restore)


@dataclass(frozen=True)
class NFSPConfig(DQNConfig):
    """NFSP's hyperparameters: DQN's (the best-response learner; see :class:`~marl_note.agents.dqn.DQNConfig`)
    with NFSP's defaults, and the average policy's own.

    ``criterion`` defaults to ``"mse"`` (DQN's Huber loss fits a median-like value to returns beyond
    +-1, so a best response ranks actions wrongly in poker); ``buffer_size``: the best response's replay,
    a sliding window of recent play (the paper's circular buffer): it must be small next to the run's
    transitions, or the Q-network learns against the other seats' policies of long ago and the average
    of its best responses stalls (Kuhn poker in 2 CPU minutes: 5,000-20,000 of about 130,000 transitions
    per seat; the default suits runs of millions of episodes); ``eta``: the anticipatory parameter;
    ``sl_lr``: the average network's Adam step;
    ``reservoir_size``: rows of the reservoir buffer; ``sl_learning_starts``: reservoir rows before
    the first supervised step; ``eps_start``/``eps_end``/``eps_steps``: the best response's
    epsilon-greedy schedule over agent steps (when no ``policy`` is given);
    ``deterministic_eval``: ``act(explore=False)`` plays the average policy's most likely action
    instead of sampling it (a Nash strategy is mixed: leave it False for exploitability).
    """

    user_torso = False  # MLP torsos only: the reservoir stores the flat network input
    hidden_sizes: tuple[int, ...] = (128,)
    gamma: float = 1.0
    # the squared TD loss, as the paper and OpenSpiel: Q must be the mean return to rank actions, and the
    # Huber loss fits a median-like value to returns beyond +-1 (card games' +-2 chips)
    criterion: str = "mse"
    lr: float = 1e-3
    buffer_size: int = 200_000
    learning_starts: int = 1_000
    replay_ratio: float = 1 / 16
    target_update: int = 300
    eta: float = 0.1
    sl_lr: float = 1e-3
    reservoir_size: int = 200_000
    sl_learning_starts: int = 1_000
    eps_start: float = 0.06
    eps_end: float = 0.001
    eps_steps: int = 1_000_000
    deterministic_eval: bool = False

    def _check(self) -> None:
        put = self._put
        put("eta", unit_interval("eta", self.eta, "the anticipatory parameter: the chance of an episode played "
                                                  "with the best response"))
        put("sl_lr", positive_float("sl_lr", self.sl_lr, "the average policy's learning rate"))
        put("reservoir_size", positive_int("reservoir_size", self.reservoir_size, "rows of the reservoir buffer"))
        put("sl_learning_starts", positive_int("sl_learning_starts", self.sl_learning_starts,
                                               "reservoir rows before the first supervised step"))
        put("eps_start", unit_interval("eps_start", self.eps_start))
        put("eps_end", unit_interval("eps_end", self.eps_end))
        put("eps_steps", positive_int("eps_steps", self.eps_steps, "agent steps of the epsilon schedule"))
        put("deterministic_eval", bool(self.deterministic_eval))
        if self.torso == "conv" or self.conv_layers is not None:
            raise ValueError("NFSP takes MLP torsos only (torso='auto' or 'mlp' over flat observations): its "
                             "reservoir stores the flat network input")


class NFSPMemory:
    """Both of NFSP's buffers behind one ``replay``: the best response's replay buffer (``rl``, to which
    everything a replay buffer does is delegated: ``len``, ``sample``, priorities, ...) and the
    reservoir of best-response actions (``sl``). ``state_dict()`` holds both (keys ``rl.*`` and
    ``sl.*``), so run checkpoints and ``save(include_replay=True)`` keep both.

    Example:
        >>> from marl_note.replay import ReplayBuffer, ReservoirBuffer
        >>> import gymnasium as gym
        >>> mem = NFSPMemory(ReplayBuffer(8, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2)),
        ...                  ReservoirBuffer(4, obs_dim=2, n_actions=2, seed=0))
        >>> mem.sl.add(np.zeros((3, 2)), np.array([0, 1, 1]))
        >>> len(mem), len(mem.sl), sorted({k.split(".")[0] for k in mem.state_dict()})
        (0, 3, ['rl', 'sl'])
    """

    def __init__(self, rl: Any, sl: ReservoirBuffer):
        self.rl, self.sl = rl, sl

    def __len__(self) -> int:
        return len(self.rl)

    def __getattr__(self, name: str) -> Any:
        if name in ("rl", "sl"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.rl, name)

    @staticmethod
    def _split(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        unknown = sorted(k for k in state if not k.startswith((_RL, _SL)))
        if unknown:
            raise ValueError(f"NFSP replay state keys must start with 'rl.' or 'sl.', got {unknown[:3]}")
        return ({k[len(_RL):]: v for k, v in state.items() if k.startswith(_RL)},
                {k[len(_SL):]: v for k, v in state.items() if k.startswith(_SL)})

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {_RL + k: v for k, v in self.rl.state_dict().items()}
        out.update({_SL + k: v for k, v in self.sl.state_dict().items()})
        return out

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        rl, sl = self._split(state)
        check = getattr(self.rl, "check_state_dict", None)
        if callable(check):
            check(rl)
        self.sl.check_state_dict(sl)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.check_state_dict(state)
        rl, sl = self._split(state)
        self.rl.load_state_dict(rl)
        self.sl.load_state_dict(sl)

    def __repr__(self) -> str:
        return f"NFSPMemory(rl={self.rl!r}, sl={self.sl!r})"


class NFSPCore(DQNCore):
    """NFSP over a Discrete action space: a DQN best response and a supervised average policy.

    Acting (``act(obs, mask, explore=True, env_ids=...)``; the trainer passes ``env_ids`` and calls
    :meth:`begin_episode` as each env starts an episode): each env stream plays a whole episode
    with one policy, the best response (epsilon-greedy over the Q-network, legal actions only) with
    probability ``eta``, else the average policy (sampled); best-response rows are offered to the
    reservoir at once, as ``(observation, action, legal actions)``. Without ``env_ids`` row ``k`` is
    env ``k``; an env never told that an episode began keeps the policy it drew first. The state
    keeps the current choice of the first 256 envs (``episode_modes``); later envs draw afresh after
    a restore.
    ``act(explore=False)`` samples the average policy (its arg-max with ``deterministic_eval``).

    Learning: ``observe`` stores every transition in the best response's replay, as DQN does,
    and each ``update(batch_size)`` runs DQN's gradient steps (``replay_ratio`` of the new env
    steps; see :class:`~marl_note.agents.dqn.DQNCore`) and as many supervised steps of the average
    network on ``batch_size`` reservoir rows, once the reservoir holds ``sl_learning_starts`` rows
    (cross-entropy of the softmax over legal actions against the stored action; metric
    ``sl_loss``). ``replay`` is an :class:`NFSPMemory` holding both buffers, so checkpoints with
    replay keep both. The networks are DQN's (``q_net``, ``target_net``, ``optimizer``) plus
    ``avg_net`` and ``avg_optimizer``, in PyTorch's names and layouts in every backend, so a
    checkpoint moves between torch, TensorFlow and numpy.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.numpy import NFSP
        >>> agent = NFSP(gym.spaces.Box(0, 1, (4,)), gym.spaces.Discrete(3), eta=1.0, seed=0)
        >>> mask = np.array([[True, False, True]])
        >>> probs = agent.policy_probs(np.zeros((1, 4)), mask)
        >>> probs.shape, float(probs.sum()), float(probs[0, 1])
        ((1, 3), 1.0, 0.0)
        >>> agent.act(np.zeros((2, 4)), explore=True, env_ids=np.array([0, 1])).shape
        (2,)
        >>> len(agent.replay.sl)  # eta=1: both rows were best-response actions
        2
    """

    config_class = NFSPConfig
    accepts_env_ids = True

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, config: NFSPConfig | None = None,
                 seed: int | None = None, device: Any = "cpu", compile: bool = False, numpy_acting: bool = True,
                 **overrides: Any):
        super().__init__(observation_space, action_space, config=config, seed=seed, device=device, compile=compile,
                         numpy_acting=numpy_acting, **overrides)
        cfg: NFSPConfig = self.cfg  # (an image observation was refused by the config: MLP torsos only)
        if cfg.policy is None:
            self.policy = EpsGreedyQPolicy(cfg.eps_start, cfg.eps_end, n_steps_annealing=cfg.eps_steps)
        self.reservoir = ReservoirBuffer(cfg.reservoir_size, self.encoder.dim, self.n_actions,
                                         seed=int(self.rng.integers(0, 2**63 - 1)))
        self.replay = NFSPMemory(self._feed.replay, self.reservoir)
        self.nets.add_average(mlp_weights("avg_net", self.encoder.dim, cfg.hidden_sizes, self.n_actions,
                                          self.init_rng), cfg.sl_lr)
        self._publish_numpy(numpy_acting, {"q_net": ("dueling" if cfg.dueling else "mlp", "q_net"),
                                           "avg_net": ("mlp", "avg_net")}, cfg.activation)
        self.modes: dict[int, bool] = {}  # env index -> playing the best response this episode
        self.sl_updates = 0

    # -- acting ------------------------------------------------------------------------------------
    def average_logits(self, obs: Any) -> np.ndarray:
        """The average network's logits ``[B, n]`` (float32 numpy)."""
        x = self.encoder(self._feed.observation(obs))
        policy = self.numpy_policy()
        return self.nets.avg_logits(x) if policy is None else policy.forward("avg_net", x)

    def policy_probs(self, obs: Any, mask: np.ndarray | None = None) -> np.ndarray:
        """The average policy's probabilities ``[B, n]``: rows sum to 1, zero on illegal actions."""
        logits = self.average_logits(obs)
        return masked_softmax(logits.astype(np.float64), check_mask(mask, len(logits), self.n_actions))

    def begin_episode(self, env_ids: Any) -> None:
        """Envs ``env_ids`` start an episode: each draws its policy for it (best response with chance ``eta``)."""
        for env in np.asarray(env_ids, np.int64).reshape(-1):
            self.modes[int(env)] = bool(self.rng.random() < self.cfg.eta)

    def _rows_mode(self, n: int, env_ids: Any) -> np.ndarray:
        ids = np.arange(n) if env_ids is None else np.asarray(env_ids, np.int64).reshape(-1)
        if len(ids) != n:
            raise ValueError(f"env_ids has {len(ids)} entries for a batch of {n}")
        fresh = [int(e) for e in ids if int(e) not in self.modes]
        if fresh:
            self.begin_episode(np.unique(fresh))
        return np.fromiter((self.modes[int(e)] for e in ids), bool, n)

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False,
            env_ids: np.ndarray | None = None) -> np.ndarray:
        x = self.encoder(self._feed.observation(obs))
        n = len(x)
        legal = check_mask(mask, n, self.n_actions)
        policy = self.numpy_policy()
        if not explore:
            logits = self.nets.avg_logits(x) if policy is None else policy.forward("avg_net", x)
            if self.cfg.deterministic_eval:
                return masked_argmax(logits, legal) + self.action_start
            return sample_categorical(masked_softmax(logits.astype(np.float64), legal), self.rng) + self.action_start
        br = self._rows_mode(n, env_ids)
        a = np.zeros(n, np.int64)
        if br.any():
            xb = x[br]
            q = self.nets.q_values(xb) if policy is None else policy.forward("q_net", xb)
            lb = None if legal is None else legal[br]
            a[br] = self.policy.select(q, lb, self.rng)
            self.reservoir.add(xb, a[br], lb)
        if not br.all():
            avg = ~br
            xa = x[avg]
            logits = self.nets.avg_logits(xa) if policy is None else policy.forward("avg_net", xa)
            a[avg] = sample_categorical(masked_softmax(logits.astype(np.float64), None if legal is None
                                                       else legal[avg]), self.rng)
        return a + self.action_start

    # -- learning ----------------------------------------------------------------------------------
    def learn_average(self, batch_size: int) -> dict[str, float]:
        """One supervised step of the average network on ``batch_size`` reservoir rows."""
        obs, act, legal = self.reservoir.sample(batch_size)
        metrics = self.nets.sl_step({"obs": obs, "act": act, "legal": legal}, who=type(self).__name__,
                                    update=self.sl_updates + 1)
        self.sl_updates += 1
        return metrics

    def update(self, batch_size: int) -> dict[str, Any]:
        """DQN's gradient steps, then as many supervised steps of the average policy (see the class)."""
        metrics = super().update(batch_size)
        steps = int(metrics["gradient_steps"])
        if steps and len(self.reservoir) >= self.cfg.sl_learning_starts:
            sl = mean_metrics(lambda: self.learn_average(batch_size), steps)  # as many, unless the budget ran out
            if sl["gradient_steps"]:
                metrics["sl_loss"] = sl["sl_loss"]
        return metrics

    def _config_knobs(self) -> tuple[str, ...]:
        return ("eta", *super()._config_knobs())

    # -- state -------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, np.ndarray]:
        # each env's policy for its current episode (-1: none drawn yet), fixed size so checkpoints keep one shape
        modes = np.full(SAVED_MODES, -1, np.int8)
        for env, best in self.modes.items():
            if env < SAVED_MODES:
                modes[env] = int(best)
        return {**super()._extra_state(), "sl_updates": np.asarray(self.sl_updates, np.int64), "episode_modes": modes}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        super()._load_extra_state(state)
        self.sl_updates = int(np.asarray(state.get("sl_updates", 0)))
        modes = np.asarray(state.get("episode_modes", np.full(SAVED_MODES, -1)), np.int64).reshape(-1)
        self.modes = {int(e): bool(m) for e, m in enumerate(modes) if m >= 0}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(obs_dim={self.encoder.dim}, n_actions={self.n_actions}, eta={self.cfg.eta}, "
                f"agent_steps={self.agent_steps}, updates={self.updates}, reservoir={len(self.reservoir)})")
