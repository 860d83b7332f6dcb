"""OpenSpiel games as PettingZoo AEC envs, through Shimmy's ``OpenSpielCompatibilityV0``.

An optional part of the env layer (``pip install marl_note[openspiel]``): ``pyspiel`` and
``shimmy`` are imported inside the functions, so ``import marl_note.envs`` loads neither.
:func:`openspiel_env` accepts two-player zero-sum games (the games whose exploitability
:func:`marl_note.trainers.exploitability.exploitability` measures) as turn-based (AEC) envs.
:func:`cooperative_parallel_env` accepts fully cooperative games with turns (every player paid
the same, ``Utility.IDENTICAL``: Hanabi) as Parallel envs in which every seat acts at every step,
the seats not on turn with one legal action, "wait" (how JaxMARL plays Hanabi), so that joint
learners (VDN, QMIX) get one row per step in which every agent acted. The legal-action mask
reaches the agents through ``info["action_mask"]`` (Shimmy's place for it), which the adapters
strip from the observation like any other mask.

The observation the agent of seat ``p`` sees at a decision node ``state`` is
:func:`observation_of` ``(state, p)``: OpenSpiel's observation tensor (Shimmy's default)
or, with ``observation="information_state"``, its information-state tensor (perfect recall),
as a float64 array of the game's tensor shape. The exploitability evaluator builds the same
arrays, so what an agent is evaluated on is exactly what it was trained on.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

__all__ = ["OBSERVATIONS", "openspiel_env", "load_game", "observation_of", "observation_shape",
           "legal_mask", "is_two_player_zero_sum", "two_player_zero_sum_games", "is_cooperative",
           "cooperative_games", "load_cooperative_game", "cooperative_parallel_env", "CooperativeParallelEnv"]

#: The observation tensors an OpenSpiel env can give its agents.
OBSERVATIONS = ("observation", "information_state")

GAME_PREFIX = "openspiel/"


def _check_observation(observation: str) -> None:
    if observation not in OBSERVATIONS:
        raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")


def is_two_player_zero_sum(game: Any) -> bool:
    """Whether a ``pyspiel.Game`` is a two-player zero-sum game with turns (sequential moves)."""
    import pyspiel

    kind = game.get_type()
    return (game.num_players() == 2 and kind.utility == pyspiel.GameType.Utility.ZERO_SUM
            and kind.dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL)


def is_cooperative(game: Any) -> bool:
    """Whether a ``pyspiel.Game`` is fully cooperative (every player gets the same payoff) with turns."""
    import pyspiel

    kind = game.get_type()
    return (kind.utility == pyspiel.GameType.Utility.IDENTICAL
            and kind.dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL)


def two_player_zero_sum_games() -> list[str]:
    """The registered OpenSpiel games that can be two-player zero-sum with sequential moves and a tensor
    observation, read from their game types (no game is loaded; a game whose default is not two
    players is refused when loaded, with its name)."""
    import pyspiel

    return sorted(
        kind.short_name for kind in pyspiel.registered_games()
        if kind.min_num_players <= 2 <= kind.max_num_players and kind.default_loadable
        and kind.utility == pyspiel.GameType.Utility.ZERO_SUM and kind.dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL
        and (kind.provides_observation_tensor or kind.provides_information_state_tensor))


def cooperative_games() -> list[str]:
    """The registered OpenSpiel games that are fully cooperative (``Utility.IDENTICAL``) with sequential
    moves and a tensor observation (``hanabi``, ``tiny_hanabi``, ...), read from their game types (no
    game is loaded); :func:`cooperative_parallel_env` plays them."""
    import pyspiel

    return sorted(
        kind.short_name for kind in pyspiel.registered_games()
        if kind.default_loadable and kind.utility == pyspiel.GameType.Utility.IDENTICAL
        and kind.dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL
        and (kind.provides_observation_tensor or kind.provides_information_state_tensor))


def _load(game: Any, game_params: dict[str, Any]) -> Any:
    """The ``pyspiel.Game`` named ``game`` (with ``game_params``) or ``game`` itself, unchecked."""
    import pyspiel

    if isinstance(game, str):
        name = game[len(GAME_PREFIX):] if game.startswith(GAME_PREFIX) else game
        base = name.split("(", 1)[0]
        if base not in pyspiel.registered_names():
            raise ValueError(f"unknown OpenSpiel game {base!r}; pyspiel.registered_names() lists the games")
        try:
            return pyspiel.load_game(name, game_params) if game_params else pyspiel.load_game(name)
        except pyspiel.SpielError as e:
            raise ValueError(f"OpenSpiel game {name!r} could not be loaded: {e}") from None
    if isinstance(game, pyspiel.Game):
        if game_params:
            raise ValueError("game parameters are only taken with a game name, not with a pyspiel.Game")
        return game
    raise TypeError(f"game must be an OpenSpiel game name or a pyspiel.Game, got {type(game).__name__}")


def _check_tensor(loaded: Any, observation: str) -> None:
    kind = loaded.get_type()
    has = kind.provides_observation_tensor if observation == "observation" else kind.provides_information_state_tensor
    if not has:
        raise ValueError(f"OpenSpiel game {str(loaded)!r} has no {observation.replace('_', '-')} tensor; "
                         f"choose observation={OBSERVATIONS[1 - OBSERVATIONS.index(observation)]!r}")


def load_game(game: Any, observation: str = "observation", **game_params: Any) -> Any:
    """The ``pyspiel.Game`` named ``game`` (or ``game`` itself), refused unless it fits.

    ``game`` is an OpenSpiel name (``"kuhn_poker"``, ``"openspiel/kuhn_poker"``, or with
    parameters ``"kuhn_poker(players=2)"``) or a ``pyspiel.Game``; ``game_params`` are passed to
    ``pyspiel.load_game``. Raises ``ValueError`` naming the game when it is not a two-player
    zero-sum game with sequential moves, or lacks the tensor ``observation`` asks for.
    """
    _check_observation(observation)
    loaded = _load(game, game_params)
    if not is_two_player_zero_sum(loaded):
        kind = loaded.get_type()
        hint = " (a cooperative game: cooperative_parallel_env plays it)" if is_cooperative(loaded) else ""
        raise ValueError(f"OpenSpiel game {str(loaded)!r} is not a two-player zero-sum game with sequential moves "
                         f"({loaded.num_players()} players, {kind.utility}, {kind.dynamics}); "
                         f"only those are supported{hint}")
    _check_tensor(loaded, observation)
    return loaded


def load_cooperative_game(game: Any, observation: str = "observation", **game_params: Any) -> Any:
    """The ``pyspiel.Game`` named ``game`` (or ``game`` itself), refused with a ``ValueError`` naming
    it unless it is fully cooperative (``Utility.IDENTICAL``) with sequential moves and has the
    tensor ``observation`` asks for; ``game`` and ``game_params`` as in :func:`load_game`.

    Example:
        >>> load_cooperative_game("hanabi", players=2, colors=2, ranks=3, hand_size=2).num_players()
        2
    """
    _check_observation(observation)
    loaded = _load(game, game_params)
    if not is_cooperative(loaded):
        kind = loaded.get_type()
        raise ValueError(f"OpenSpiel game {str(loaded)!r} is not a fully cooperative game with sequential moves "
                         f"({kind.utility}, {kind.dynamics}); cooperative_parallel_env takes only those "
                         f"(Utility.IDENTICAL: every player gets the same payoff)")
    _check_tensor(loaded, observation)
    return loaded


def observation_shape(game: Any, observation: str = "observation") -> tuple[int, ...]:
    """The shape of the tensor ``observation`` names, for ``game``."""
    _check_observation(observation)
    if observation == "observation":
        return tuple(game.observation_tensor_shape())
    return tuple(game.information_state_tensor_shape())


def observation_of(state: Any, player: int, observation: str = "observation",
                   shape: tuple[int, ...] | None = None) -> np.ndarray:
    """What the agent of seat ``player`` observes at ``state`` (float64, the game's tensor shape)."""
    tensor = state.observation_tensor(player) if observation == "observation" else \
        state.information_state_tensor(player)
    out = np.asarray(tensor, dtype=np.float64)
    return out.reshape(shape if shape is not None else observation_shape(state.get_game(), observation))


def legal_mask(state: Any, player: int, num_actions: int) -> np.ndarray:
    """The legal actions of ``player`` at ``state`` as a boolean mask of ``num_actions``."""
    mask = np.zeros(num_actions, dtype=bool)
    mask[state.legal_actions(player)] = True
    return mask


def chance_outcome(outcomes: list[tuple[int, float]], u: float) -> int:
    """The outcome of ``[(outcome, probability), ...]`` that the uniform number ``u`` in [0, 1) falls on
    (the generator's ``choice(p=...)`` validates ``p`` on every call: a third of a Kuhn episode's cost).

    Example:
        >>> chance_outcome([(0, 0.5), (1, 0.25), (2, 0.25)], 0.6)
        1
    """
    total = 0.0
    for outcome, p in outcomes:
        total += p
        if u < total:
            return int(outcome)
    return int(outcomes[-1][0])  # rounding left u above the total


def _restart(env: Any, seed: int | None) -> None:
    """Shimmy's ``reset`` less its reloading of the game (only games refused here are reseeded by reloading)
    and its fresh OS-seeded generator on every reset without a seed: that one keeps the generator."""
    from gymnasium.utils import seeding

    if seed is not None or not env._seeded:
        env.np_random, env.np_seed = seeding.np_random(seed)
        env._seeded = True
    env.agents = env.possible_agents[:]
    env._cumulative_rewards = dict.fromkeys(env.agents, 0.0)
    env.rewards = dict.fromkeys(env.agents, 0.0)
    env.terminations = dict.fromkeys(env.agents, False)
    env.truncations = dict.fromkeys(env.agents, False)
    env.infos = {a: {} for a in env.agents}
    env.game_length = 1
    env.game_state = env._env.new_initial_state()
    env.simultaneous_actions = {}
    env._execute_chance_node()
    env._update_action_masks()
    env._update_observations()
    env._choose_next_agent()


def _build_observation_spaces(env: Any, shimmy_build: Any) -> None:
    """Shimmy's observation-tensor spaces, or Boxes of the information-state tensor's shape."""
    if env.observation_kind == "observation":
        shimmy_build()
        return
    import gymnasium as gym

    shape = tuple(env._env.information_state_tensor_shape())
    for agent in env.possible_agents:
        env.observation_spaces[agent] = gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float64)


def _env_class() -> type:
    """Shimmy's ``OpenSpielCompatibilityV0`` with the two fixes marl_note needs (built on first use).

    - Shimmy 2.0.1 truncates a game once its count of nodes, chance nodes included, passes
      ``max_game_length()`` (which counts decisions only): Kuhn poker ended as truncated after
      "bet". OpenSpiel games end by themselves, so here an episode ends when the state is terminal.
    - Shimmy 2.0.1 adds the final rewards again on each dead step (``step(None)`` of a finished
      agent), so the last seat to leave was paid twice (-4 for a 2-chip loss in Kuhn poker); here a
      dead step only removes the agent.
    - ``observation="information_state"`` gives each seat its information-state tensor, refreshed
      after every step that does not end the game (as Shimmy does its observation tensor).
    - Shimmy 2.0.1's ``reset(seed=None)`` draws a fresh random generator from the OS, so every episode
      after the first seeded one dealt unseeded cards (a seeded run was not reproducible); here
      ``reset()`` without a seed keeps the generator, as PettingZoo envs do.
    - Speed: Shimmy rebuilds the observation and action spaces on every step and reloads the game on
      every reset (two ``Box`` constructions per step were most of a Kuhn episode's cost); here the
      spaces are built once (a loaded game's shapes do not change), the game is loaded once, and a
      chance outcome is drawn by one uniform number against the cumulative probabilities.
    """
    global _ENV_CLASS
    if _ENV_CLASS is not None:
        return _ENV_CLASS
    from shimmy import OpenSpielCompatibilityV0

    class OpenSpielEnv(OpenSpielCompatibilityV0):
        def __init__(self, game_name: str, config: dict, observation: str = "observation",
                     render_mode: str | None = None):
            self.observation_kind = observation
            self._seeded = False
            super().__init__(game_name=game_name, config=config, render_mode=render_mode)
            self._ezpickle_args = (game_name, config, observation, render_mode)  # (Shimmy records its own)
            self._ezpickle_kwargs: dict = {}

        def _update_observation_spaces(self) -> None:
            if not self.observation_spaces:  # built in __init__; a loaded game's shapes do not change
                _build_observation_spaces(self, super()._update_observation_spaces)

        def _update_action_spaces(self) -> None:
            if not self.action_spaces:
                super()._update_action_spaces()

        def reset(self, seed: int | None = None, options: dict | None = None) -> None:
            _restart(self, seed)

        def _execute_chance_node(self) -> None:
            state = self.game_state
            while state.is_chance_node():
                self.game_length += 1
                state.apply_action(chance_outcome(state.chance_outcomes(), self.np_random.random()))

        def _update_observations(self) -> None:
            if self.game_state.is_terminal():
                return
            shape = tuple(self.observation_space(self.possible_agents[0]).shape)
            self.observations = {name: observation_of(self.game_state, pid, self.observation_kind, shape)
                                 for pid, name in self.agent_id_name_mapping.items()}

        def step(self, action: Any) -> None:
            agent = self.agent_selection
            if self.terminations.get(agent) or self.truncations.get(agent):
                self._end_routine()  # PettingZoo's dead step: the agent leaves, nobody is paid again
                self._choose_next_agent()
                return
            super().step(action)

        def _update_termination_truncation(self) -> None:
            over = self.game_state.is_terminal()
            self.terminations = {a: over for a in self.agents}
            self.truncations = {a: False for a in self.agents}

    OpenSpielEnv.__module__ = __name__
    OpenSpielEnv.__qualname__ = "OpenSpielEnv"
    _ENV_CLASS = OpenSpielEnv
    return OpenSpielEnv


_ENV_CLASS: type | None = None


def __getattr__(name: str) -> Any:
    # ``OpenSpielEnv`` is built on first use (it subclasses Shimmy's env), and found by name when unpickled
    if name == "OpenSpielEnv":
        return _env_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def openspiel_env(game: Any, *, observation: str = "observation", render_mode: str | None = None,
                  **game_params: Any) -> Any:
    """A two-player zero-sum OpenSpiel game as a PettingZoo AEC env (Shimmy's ``OpenSpielCompatibilityV0``).

    ``game``: an OpenSpiel name (``"kuhn_poker"``, ``"leduc_poker"``, ``"openspiel/kuhn_poker"``, any
    game ``pyspiel.registered_names()`` lists) or a ``pyspiel.Game``; ``game_params`` go to
    ``pyspiel.load_game``. ``observation``: ``"observation"`` (OpenSpiel's observation tensor,
    Shimmy's default) or ``"information_state"`` (the information-state tensor, perfect recall).
    Seats are ``player_0``, ``player_1`` (OpenSpiel's player ids, in that order); the legal-action
    mask is in ``info["action_mask"]``. A game that is not two-player zero-sum, or that lacks the
    tensor asked for, is refused with a ``ValueError`` naming it before anything is built.

    Example:
        >>> env = openspiel_env("kuhn_poker")
        >>> env.reset(seed=0)
        >>> env.possible_agents, env.observation_space("player_0").shape
        (['player_0', 'player_1'], (7,))
        >>> env.last()[4]["action_mask"].tolist()
        [1, 1]
    """
    loaded = load_game(game, observation, **game_params)
    # By name and parameters, not as the Game object: Shimmy's reset() reloads the game from these.
    return _env_class()(loaded.get_type().short_name, dict(loaded.get_parameters()), observation, render_mode)


class CooperativeParallelEnv(ParallelEnv):
    """A fully cooperative OpenSpiel game with turns as a PettingZoo Parallel env: every seat acts at
    every step (build it with :func:`cooperative_parallel_env`).

    Seats are ``player_0`` ... (OpenSpiel's player ids). Each seat's action space is
    ``Discrete(game.num_distinct_actions() + 1)``: the game's actions, then ``wait``
    (``num_distinct_actions()``), the one legal action of a seat that is not on turn and never
    legal for the seat on turn. The mask is in ``info["action_mask"]`` (int8, 1 = legal); the
    observation is seat ``p``'s tensor (:func:`observation_of`, float32). A step applies the action
    of the seat on turn, then the chance moves that follow (drawn from the env's generator,
    ``reset(seed=...)`` seeds it; ``reset()`` without a seed keeps it); every seat's reward is the
    change of its return (so a game's rewards add up to its final returns, and every seat gets the
    same). The episode ends, as terminated for every seat, when the game is over (the games end by
    themselves: no truncation). An action that is not legal for its seat is refused with a
    ``ValueError`` naming the seat before the game moves.

    Example:
        >>> env = cooperative_parallel_env("hanabi", players=2, colors=2, ranks=3, hand_size=2,
        ...                                max_information_tokens=3, max_life_tokens=1)
        >>> obs, infos = env.reset(seed=0)
        >>> env.action_space("player_0"), env.wait
        (Discrete(10), 9)
        >>> [np.flatnonzero(infos[a]["action_mask"]).tolist() for a in env.agents]  # player_0 is on turn
        [[2, 3, 4, 6], [9]]
        >>> obs, rewards, terminated, truncated, infos = env.step({"player_0": 2, "player_1": env.wait})  # plays Y1
        >>> rewards, [np.flatnonzero(infos[a]["action_mask"]).tolist() for a in env.agents]
        ({'player_0': 1.0, 'player_1': 1.0}, [[9], [2, 3, 4, 5, 6, 7]])
    """

    metadata = {"name": "openspiel_cooperative_parallel", "render_modes": [], "is_parallelizable": True}

    def __init__(self, game: Any, observation: str = "observation"):
        import gymnasium as gym

        self.game = game
        self.observation_kind = observation
        self.possible_agents = [f"player_{p}" for p in range(game.num_players())]
        self.agents: list[str] = []
        self.wait = int(game.num_distinct_actions())
        self._shape = observation_shape(game, observation)
        self.observation_spaces = {a: gym.spaces.Box(-np.inf, np.inf, self._shape, np.float32)
                                   for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(self.wait + 1) for a in self.possible_agents}
        self.np_random = np.random.default_rng()
        self.game_state: Any = None

    def observation_space(self, agent: str) -> Any:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.game_state = self.game.new_initial_state()
        self._chance()
        self.agents = self.possible_agents[:]
        return self._observe()

    def _chance(self) -> None:
        state = self.game_state
        while state.is_chance_node():
            state.apply_action(chance_outcome(state.chance_outcomes(), self.np_random.random()))

    def _mask(self, player: int) -> np.ndarray:
        mask = np.zeros(self.wait + 1, np.int8)
        state = self.game_state
        if not state.is_terminal() and state.current_player() == player:
            mask[state.legal_actions(player)] = 1
        else:
            mask[self.wait] = 1
        return mask

    def _observe(self) -> tuple[dict, dict]:
        obs = {a: observation_of(self.game_state, p, self.observation_kind, self._shape).astype(np.float32)
               for p, a in enumerate(self.possible_agents)}
        infos = {a: {"action_mask": self._mask(p)} for p, a in enumerate(self.possible_agents)}
        return obs, infos

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset() first")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"every seat acts at every step; no action for {missing} (a seat not on turn "
                             f"plays wait = {self.wait})")
        state = self.game_state
        mover = state.current_player()
        for p, agent in enumerate(self.possible_agents):
            action = int(actions[agent])
            if not self._mask(p)[action] if 0 <= action <= self.wait else True:
                turn = "on turn" if p == mover else f"not on turn: its only legal action is wait = {self.wait}"
                raise ValueError(f"seat {agent!r} played {action}, which is not legal ({turn}; legal "
                                 f"{np.flatnonzero(self._mask(p)).tolist()})")
        before = np.asarray(state.returns(), np.float64)
        state.apply_action(int(actions[self.possible_agents[mover]]))
        self._chance()
        gained = np.asarray(state.returns(), np.float64) - before
        obs, infos = self._observe()
        over = state.is_terminal()
        rewards = {a: float(gained[p]) for p, a in enumerate(self.possible_agents)}
        terminated = dict.fromkeys(self.possible_agents, over)
        truncated = dict.fromkeys(self.possible_agents, False)
        if over:
            self.agents = []
        return obs, rewards, terminated, truncated, infos

    def __reduce__(self) -> tuple:  # a pyspiel state does not pickle: rebuild from the game
        return (type(self), (self.game, self.observation_kind))


def cooperative_parallel_env(game: Any, *, observation: str = "observation", **game_params: Any) -> Any:
    """A fully cooperative OpenSpiel game with turns (``Utility.IDENTICAL``: Hanabi) as a Parallel env in
    which every seat acts at every step, the seats not on turn with ``wait`` as their one legal action
    (:class:`CooperativeParallelEnv`).

    ``game``, ``observation`` and ``game_params`` as in :func:`openspiel_env`. A game that is not
    fully cooperative with sequential moves, or that lacks the tensor asked for, is refused with a
    ``ValueError`` naming it before anything is built.

    Example:
        >>> env = cooperative_parallel_env("hanabi", players=2, colors=2, ranks=3, hand_size=2,
        ...                                max_information_tokens=3, max_life_tokens=1)
        >>> env.possible_agents, env.observation_space("player_0").shape
        (['player_0', 'player_1'], (113,))
    """
    return CooperativeParallelEnv(load_cooperative_game(game, observation, **game_params), observation)
