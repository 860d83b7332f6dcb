"""AlphaZero, the numpy half: the search, the self-play targets, the replay of positions, the schedule.

:class:`AlphaZeroCore` acts by :class:`~marl_note.contrib.alphazero.mcts.MCTS` guided by its policy/value
network and learns from its own games: each position it searched while exploring is stored with
the search's visit distribution and, when the episode ends, the game's outcome for the player who
was to move. The backends (:mod:`marl_note.contrib.alphazero.torch.alphazero`,
:mod:`marl_note.contrib.alphazero.tf.alphazero`)
add only the network and one gradient step.

Where the search starts: the trainer hands an agent observations and masks, not env states. For
tic-tac-toe and connect four the observation (own pieces, opponent's pieces, seen by the player to
move) determines the position completely, so the agent rebuilds the board from it and searches
with the board rules (:class:`~marl_note.contrib.alphazero.mcts.BoardSimulator`, twenty times faster than
copying the env). Any other observation space is refused when the agent is built.

Example:
    >>> AlphaZeroConfig(num_simulations=8).num_simulations
    8
    >>> AlphaZeroConfig(c_puct=0)
    Traceback (most recent call last):
    ...
    ValueError: c_puct must be a positive finite number, got 0
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.core import AgentCore
from marl_note.agents.encoders import ObsEncoder
from marl_note.agents.exploration.masked import masked_argmax, masked_softmax, sample_categorical
from marl_note.agents.networks import mlp_weights, torso_weights
from marl_note.agents.options import BufferOptions, ScheduleOptions, TorsoOptions
from marl_note.agents.schedule import gradient_steps, mean_metrics
from marl_note.contrib.alphazero.mcts import MCTS, BoardSimulator
from marl_note.contrib.board_games.rules import CONNECT_FOUR, TIC_TAC_TOE
from marl_note.replay.memory import check_fits, storage_nbytes
from marl_note.types import Transitions
from marl_note.validation import (
    non_negative_float,
    non_negative_int,
    optional,
    positive_float,
    positive_int,
    unit_interval,
)

__all__ = ["AlphaZeroConfig", "AlphaZeroCore", "NetworkPlayer", "PositionReplay", "board_simulator_for"]

_MAX_TARGETS = 100_000  # searched positions waiting for their transition (oldest dropped first)


@dataclass(frozen=True)
class AlphaZeroConfig(ScheduleOptions, BufferOptions, TorsoOptions):
    """AlphaZero's hyperparameters (see :class:`AlphaZeroCore`), checked on creation.

    The network, buffer (of positions) and schedule options are the groups of
    :mod:`marl_note.agents.options`; the fields below are AlphaZero's own, and the defaults where
    AlphaZero differs from a group's.
    """

    hidden_sizes: tuple[int, ...] = (128, 128)
    buffer_size: int = 50_000
    learning_starts: int = 256
    replay_ratio: float = 0.5
    lr: float = 1e-3
    weight_decay: float = 1e-4
    max_grad_norm: float | None = None
    num_simulations: int = 50
    c_puct: float = 1.5
    dirichlet_alpha: float = 0.5
    dirichlet_epsilon: float = 0.25
    temperature_moves: int = 8
    mirror: bool = False

    def _check(self) -> None:
        put = self._put
        if not self.hidden_sizes:
            raise ValueError("AlphaZero needs at least one hidden layer (the torso under the policy and value heads)")
        put("lr", positive_float("lr", self.lr))
        put("weight_decay", non_negative_float("weight_decay", self.weight_decay, "the L2 penalty on every weight"))
        put("max_grad_norm", optional(positive_float, "max_grad_norm", self.max_grad_norm))
        put("num_simulations", positive_int("num_simulations", self.num_simulations, "simulations per search"))
        put("c_puct", positive_float("c_puct", self.c_puct))
        put("dirichlet_alpha", positive_float("dirichlet_alpha", self.dirichlet_alpha))
        put("dirichlet_epsilon", unit_interval("dirichlet_epsilon", self.dirichlet_epsilon))
        put("temperature_moves", non_negative_int("temperature_moves", self.temperature_moves,
                                                  "plies played by sampling moves in proportion to visits"))
        put("mirror", bool(self.mirror))


def board_simulator_for(observation_space: gym.Space, action_space: gym.Space) -> BoardSimulator:
    """The rules simulator of the game whose observations and actions these are, or a clear refusal."""
    for game in (TIC_TAC_TOE, CONNECT_FOUR):
        if (isinstance(observation_space, gym.spaces.Box) and tuple(observation_space.shape) == game.obs_shape
                and isinstance(action_space, gym.spaces.Discrete) and int(action_space.n) == game.num_actions
                and int(action_space.start) == 0):
            return BoardSimulator(game)
    raise ValueError(
        f"AlphaZero searches two-player, alternating, zero-sum board games whose observation is the whole "
        f"position (tic-tac-toe: Box (3, 3, 2) with Discrete(9); connect four: Box (6, 7, 2) with Discrete(7)); "
        f"got {observation_space} with {action_space}. Other envs (parallel, more players, hidden state) "
        f"have no simulator the agent can rebuild from an observation")


class PositionReplay:
    """A ring buffer of training positions: encoded observation, legal moves, visit distribution, outcome.

    Preallocated at full size: before allocating, a ``capacity`` whose positions would not fit in
    the machine's available memory is refused with a
    :class:`~marl_note.replay.memory.ReplayMemoryError` (as the replay buffers are; see
    :mod:`marl_note.replay.memory`).

    Example:
        >>> replay = PositionReplay(3, obs_dim=2, n_actions=2)
        >>> replay.add(np.ones((4, 2)), np.ones((4, 2), bool), np.full((4, 2), 0.5), np.array([1, -1, 0, 1.0]))
        >>> len(replay), sorted(replay.sample(2, np.random.default_rng(0)))
        (3, ['legal', 'obs', 'pi', 'z'])
    """

    def __init__(self, capacity: int, obs_dim: int | tuple[int, ...], n_actions: int):
        self.capacity = positive_int("capacity", capacity)
        specs = {"obs": (tuple(int(d) for d in np.atleast_1d(obs_dim)), np.dtype(np.float32)),
                 "legal": ((int(n_actions),), np.dtype(bool)), "pi": ((int(n_actions),), np.dtype(np.float32)),
                 "z": ((), np.dtype(np.float32))}
        check_fits(storage_nbytes(self.capacity, specs), self.capacity, option="AlphaZero buffer_size",
                   capacity_means="positions kept for training", item="position")
        self.obs = np.zeros((capacity, *np.atleast_1d(obs_dim)), np.float32)
        self.legal = np.zeros((capacity, n_actions), bool)
        self.pi = np.zeros((capacity, n_actions), np.float32)
        self.z = np.zeros(capacity, np.float32)
        self.size = self.pos = 0

    def add(self, obs: np.ndarray, legal: np.ndarray, pi: np.ndarray, z: np.ndarray) -> None:
        for k in range(len(obs)):
            at = self.pos
            self.obs[at], self.legal[at], self.pi[at], self.z[at] = obs[k], legal[k], pi[k], z[k]
            self.pos = (at + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        idx = rng.integers(0, self.size, batch_size)
        return {"obs": self.obs[idx], "pi": self.pi[idx], "legal": self.legal[idx], "z": self.z[idx]}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The stored positions and the write position (``agent.save(path, include_replay=True)``)."""
        return {"obs": self.obs.copy(), "legal": self.legal.copy(), "pi": self.pi.copy(), "z": self.z.copy(),
                "size": np.asarray(self.size, np.int64), "pos": np.asarray(self.pos, np.int64)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key in ("obs", "legal", "pi", "z"):
            getattr(self, key)[...] = state[key]
        self.size, self.pos = int(state["size"]), int(state["pos"])

    def __len__(self) -> int:
        return self.size


class AlphaZeroCore(AgentCore):
    """AlphaZero for tic-tac-toe and connect four: PUCT search with a policy/value network, self-play targets.

    The network is an MLP torso (``hidden_sizes``, every layer activated; behind a conv torso
    ``net.trunk.conv.*`` with ``torso="conv"``, ``conv_layers``, see
    :mod:`~marl_note.agents.encoders`; ``"auto"`` keeps these small boards on the MLP) under one linear head
    ``net.pi`` of ``n_actions + 1`` outputs: the move logits, then the value before ``tanh``
    (state keys ``net.trunk.*``, ``net.pi.0.*``). ``act(obs, mask, explore)`` runs
    ``num_simulations`` PUCT simulations (``c_puct``) from every row's position (rebuilt from the
    observation, see the module docstring); with ``explore=True`` the root priors get Dirichlet
    noise (``dirichlet_alpha``, ``dirichlet_epsilon``), the move is drawn in proportion to the visit
    counts (temperature 1) while fewer than ``temperature_moves`` plies have been played and is
    the most visited move after that; ``explore=False`` always plays the most visited move. Values
    are for the player to move, so one agent plays both seats (``trainer.train([az, az],
    learning_mask=[1, 1])``).

    Training data: every position searched with ``explore=True`` keeps its visit distribution
    ``pi`` until ``observe`` sees the transition from it; when the transition's stream ends with a
    terminated row, each of the stream's positions of that episode is stored with the outcome
    ``z`` (the seat's summed reward, clipped to [-1, 1]); a truncated episode stores nothing. Each
    gradient step minimises ``-sum pi log p + (v - z)^2 + weight_decay * |w|^2`` on a batch from the
    last ``buffer_size`` positions; ``update()`` takes ``update_steps`` steps, or ``max(1,
    round(replay_ratio * new positions))``, none before ``learning_starts`` positions are stored.
    ``mirror=True`` also stores every position mirrored left to right (both games are symmetric).
    The replay and the pending positions are not part of ``state_dict()`` (a restored agent starts
    collecting afresh).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.contrib.alphazero.torch import AlphaZero
        >>> agent = AlphaZero(gym.spaces.Box(0, 1, (3, 3, 2), np.int8), gym.spaces.Discrete(9),
        ...                   hidden_sizes=(16,), num_simulations=30, seed=0)
        >>> obs = np.zeros((1, 3, 3, 2), np.int8)
        >>> obs[0, 0, :2, 0] = 1; obs[0, 1, :2, 1] = 1      # two in a row on top: the search completes it
        >>> mask = (obs.sum(-1) == 0).reshape(1, 9)
        >>> agent.act(obs, mask).tolist()
        [2]
    """

    config_class = AlphaZeroConfig

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 config: AlphaZeroConfig | None = None, seed: int | None = None, device: Any = "cpu",
                 compile: bool = False, numpy_acting: bool = True, **overrides: Any):
        self.simulator = board_simulator_for(observation_space, action_space)
        super().__init__(observation_space, action_space, seed=seed, device=device, compile=compile)
        cfg = self._resolve_config(config, overrides)
        self.encoder = ObsEncoder(observation_space, cfg.torso, cfg.conv_layers)
        self.cfg = cfg = replace(cfg, torso=self.encoder.torso, conv_layers=self.encoder.conv_layers or None)
        self.n_actions = self.simulator.num_actions  # board_simulator_for checked Discrete(n) against the game
        self.mcts = MCTS(self.simulator, self.evaluate, cfg.num_simulations, cfg.c_puct, cfg.dirichlet_alpha,
                         cfg.dirichlet_epsilon, rng=self.rng)
        encoded = self.encoder(np.zeros((1, *self.simulator.game.obs_shape), np.int8)).shape[1:]  # flat or image
        self.replay = PositionReplay(cfg.buffer_size, encoded, self.n_actions)
        self._targets: dict[bytes, np.ndarray] = {}  # encoded observation -> visit distribution of its search
        self._episodes: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        self._returns: dict[int, float] = {}
        self._new_positions = 0
        conv, in_dim = torso_weights("net.trunk", self.encoder, self.init_rng)  # a conv torso: net.trunk.conv.*
        weights = {**conv, **mlp_weights("net.trunk", in_dim, cfg.hidden_sizes, None, self.init_rng),
                   **mlp_weights("net.pi", cfg.hidden_sizes[-1], (), self.n_actions + 1, self.init_rng)}
        self.nets = self.Networks(weights, cfg, device=self.device, compile=self.compile)
        self._publish_numpy(numpy_acting, {"net": ("shared", "net")}, cfg.activation, conv=cfg.conv_layers,
                            conv_prefix="net.trunk.conv")

    # -- the network -------------------------------------------------------------------------------
    def predict(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Move logits ``[B, n]`` and values ``[B]`` (in [-1, 1], for the player to move) of observations."""
        x = self.encoder(obs)
        policy = self.numpy_policy()
        out = self.nets.predict(x) if policy is None else policy.forward("net", x)
        return out[:, :-1], np.tanh(out[:, -1])

    def evaluate(self, obs: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The search's evaluator: priors (softmax over the legal moves) and values."""
        logits, values = self.predict(obs)
        logits = np.where(legal, logits.astype(np.float64), -np.inf)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True), values

    def network_player(self, seed: int | None = None) -> NetworkPlayer:
        """The policy network alone, without the search: a :class:`NetworkPlayer` on these weights."""
        return NetworkPlayer(self, seed=seed)

    # -- acting ------------------------------------------------------------------------------------
    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        if mask is None:
            raise ValueError("AlphaZero needs the action mask of a turn-based env (act(obs, mask=...)); got none")
        x = self.encoder(obs)
        legal = np.asarray(mask, bool)
        if legal.shape != (len(x), self.n_actions):
            raise ValueError(f"mask has shape {legal.shape}, expected {(len(x), self.n_actions)}")
        states = self.simulator.from_observation(np.asarray(obs))
        for k, state in enumerate(states):
            if not np.array_equal(self.simulator.legal(state), legal[k]):
                raise ValueError(f"row {k}: the action mask differs from the legal moves of the board in the "
                                 f"observation; AlphaZero searches from the observed board")
        visits = self.mcts.search(states, explore=explore)
        if not explore:
            return masked_argmax(visits.astype(np.float64), legal)
        pi = (visits / visits.sum(axis=1, keepdims=True)).astype(np.float32)
        actions = np.empty(len(states), np.int64)
        for k, state in enumerate(states):
            if self.simulator.ply(state) < self.cfg.temperature_moves:
                actions[k] = self.rng.choice(self.n_actions, p=visits[k] / visits[k].sum())  # float64: sums to 1
            else:
                actions[k] = int(np.argmax(visits[k]))
            self._remember(x[k].tobytes(), pi[k])
        return actions

    def _remember(self, key: bytes, pi: np.ndarray) -> None:
        self._targets.pop(key, None)  # re-inserted at the end: the oldest searches go first
        self._targets[key] = pi
        if len(self._targets) > _MAX_TARGETS:
            del self._targets[next(iter(self._targets))]

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        """Match each transition to its search; store a stream's positions with the outcome when it ends."""
        if not isinstance(transitions, Transitions):
            raise TypeError(f"observe() expects a marl_note.types.Transitions batch, got {type(transitions).__name__}")
        n = len(transitions)
        x = self.encoder(transitions.obs)
        legal = np.ones((n, self.n_actions), bool) if transitions.mask is None else np.asarray(transitions.mask, bool)
        streams = np.zeros(n, np.int64) if transitions.stream is None else np.asarray(transitions.stream, np.int64)
        rew = np.asarray(transitions.rew, np.float64)
        for k in range(n):
            s = int(streams[k])
            pi = self._targets.pop(x[k].tobytes(), None)
            if pi is not None:
                self._episodes.setdefault(s, []).append((x[k], legal[k], pi))
            self._returns[s] = self._returns.get(s, 0.0) + float(rew[k])
            if transitions.terminated[k] or transitions.truncated[k]:
                positions = self._episodes.pop(s, [])
                z = float(np.clip(self._returns.pop(s, 0.0), -1.0, 1.0))
                if transitions.terminated[k] and positions:
                    obs, ok, pis = (np.stack(col) for col in zip(*positions))
                    self._store(obs, ok, pis, np.full(len(positions), z, np.float32))
        self.agent_steps += n

    def _store(self, obs: np.ndarray, legal: np.ndarray, pi: np.ndarray, z: np.ndarray) -> None:
        self.replay.add(obs, legal, pi, z)
        self._new_positions += len(obs)  # what replay_ratio multiplies: the real positions only
        if self.cfg.mirror:
            game = self.simulator.game
            flip = self.simulator.mirror_actions
            boards = obs.reshape(len(obs), game.rows, game.cols, 2)[:, :, ::-1].reshape(obs.shape)
            self.replay.add(boards, legal[:, flip], pi[:, flip], z)

    # -- learning ----------------------------------------------------------------------------------
    def learn(self, arrays: Mapping[str, np.ndarray]) -> dict[str, float]:
        """One gradient step on a batch ``{obs, pi, legal, z}``."""
        metrics = self.nets.train_step(arrays, who=type(self).__name__, update=self.updates + 1)
        self.updates += 1
        return metrics

    def update(self, batch_size: int) -> dict[str, Any]:
        """This call's gradient steps on positions from the replay; mean metrics and ``gradient_steps``."""
        batch_size = positive_int("batch_size", batch_size)
        new, self._new_positions = self._new_positions, 0
        cfg = self.cfg
        steps = gradient_steps(len(self.replay), new, cfg.learning_starts, cfg.update_steps, cfg.replay_ratio)
        if not steps or (cfg.update_steps is None and not new):
            return {"gradient_steps": 0}
        return mean_metrics(lambda: self.learn(self.replay.sample(batch_size, self.rng)), steps)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.simulator.game.name}, simulations={self.cfg.num_simulations}, "
                f"positions={len(self.replay)}, agent_steps={self.agent_steps}, updates={self.updates})")


class NetworkPlayer:
    """An AlphaZero agent's policy head played without search: the legal move of highest prior
    (``explore=True``: a move drawn from the softmax over the legal moves).

    One network call a move instead of ``num_simulations``: a fast opponent for other learners, or
    a measure of how much of the search the network has learnt (``bench/bench_strength.py --game
    alphazero`` plays both). It reads the agent's current weights at every call, so it follows
    training; it does not learn and stores nothing.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.contrib.alphazero.torch import AlphaZero
        >>> agent = AlphaZero(gym.spaces.Box(0, 1, (3, 3, 2), np.int8), gym.spaces.Discrete(9),
        ...                   hidden_sizes=(16,), seed=0)
        >>> player = agent.network_player()
        >>> mask = np.zeros((1, 9), bool); mask[0, [4, 7]] = True
        >>> int(player.act(np.zeros((1, 3, 3, 2), np.int8), mask)[0]) in (4, 7)
        True
    """

    def __init__(self, agent: AlphaZeroCore, seed: int | None = None):
        self.agent = agent
        self.observation_space, self.action_space = agent.observation_space, agent.action_space
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        if mask is None:
            raise ValueError("the AlphaZero network player needs the action mask (act(obs, mask=...)); got none")
        logits, _ = self.agent.predict(np.asarray(obs))
        if not explore:
            return masked_argmax(logits, mask)
        return sample_categorical(masked_softmax(logits, mask), self.rng)
