"""PSRO (policy-space response oracles, Lanctot et al. 2017) over the :class:`OpponentPool`.

Each iteration trains a fresh best response (a new agent the user's ``make_agent`` builds: DQN,
PPO, ...) with the :class:`~marl_note.trainers.DecentralizedTrainer` against the current
meta-strategy mixture of the pool: the pool is the trainer's matchmaker and draws, per episode
and env, one member by the meta-strategy as the opponent (:class:`MetaStrategyPool`). The new
agent joins the pool, the payoff matrix between members grows by a row and a column, the
meta-game is solved again (:mod:`marl_note.trainers.meta_solvers`), and for an OpenSpiel game the
exploitability of the mixture is measured exactly.

Payoffs. For an OpenSpiel game they are exact: one walk over the game tree gives the expected
return of every pair of members (chance, and each member's action probabilities from
``policy_probs``, multiplied along every history), the same quantity OpenSpiel's
``expected_game_score.policy_value`` gives pair by pair, with no sampling noise (the meta-solver
then solves the true meta-game, and a tree walk for all pairs is cheaper than games for kuhn and
leduc). For any other two-seat env (PettingZoo games without a tree) they are the mean returns of
``payoff_episodes`` greedy games per pair and seat order, played on the trainer's test envs.
``payoffs[i, j]`` is member ``i``'s expected return against member ``j``, averaged over the two
seat orders, so the matrix is antisymmetric for a zero-sum game.

The mixture. A meta-strategy ``w`` over members is a mixed strategy: draw member ``k`` with
probability ``w_k`` at the start of the game and follow it throughout. Its behaviour policy at
an information state ``s`` of player ``p`` weights each member by ``w_k`` times the probability
that member's own actions reach ``s`` (perfect recall), not by ``w_k`` alone
(:func:`mixture_policy`; the same as OpenSpiel's ``policy_aggregator.PolicyAggregator``).
Opponents during training are members played whole per episode, so the best response is
trained against exactly that mixture.
"""
from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from marl_note.agents.base import Acting, ActionProbabilities, HasObservationSpace, RandomAgent
from marl_note.agents.checkpoints.saving import Saving
from marl_note.trainers.meta_solvers import META_SOLVERS, meta_solver
from marl_note.trainers.selfplay import OpponentPool, snapshot

__all__ = ["PSRO", "MetaStrategyPool", "PolicyMember", "TabularMember", "exact_payoffs", "mixture_policy", "load_psro",
           "PSROPopulation"]

PSRO_FILE = "psro.json"
PSRO_FORMAT = "marl_note-psro-1"


class PolicyMember:
    """A pool member that acts by sampling its own ``policy_probs`` (greedy ``act`` without them).

    So a member plays during training exactly the policy that exploitability and the exact payoffs
    read: a DQN member its greedy action, a PPO member a draw from its softmax.

    Example:
        >>> import gymnasium as gym
        >>> member = PolicyMember(RandomAgent(gym.spaces.Discrete(3)), "random", seed=0)
        >>> member.act(np.zeros((4, 1)), np.array([[True, False, False]] * 4)).tolist()
        [0, 0, 0, 0]
    """

    def __init__(self, agent: Any, name: str, seed: int | None = None):
        self.agent, self.name = agent, name
        self.action_space = agent.action_space
        if isinstance(agent, HasObservationSpace):
            self.observation_space = agent.observation_space
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        if not isinstance(self.agent, ActionProbabilities):
            return self.agent.act(obs, mask, explore=False)
        probs = np.asarray(self.agent.policy_probs(obs, mask), dtype=np.float64)
        cdf = np.cumsum(probs, axis=1)
        u = self.rng.random((probs.shape[0], 1)) * cdf[:, -1:]
        return np.minimum((u >= cdf).sum(axis=1), probs.shape[1] - 1).astype(np.int64)

    def __repr__(self) -> str:
        return f"PolicyMember({self.name!r})"


class TabularMember:
    """A fixed policy of an OpenSpiel game (a ``TabularPolicy``) acting on the env's observations.

    Its ``policy_probs(obs, mask)`` looks each observation up among the information states of the
    game (the tensor ``observation`` names, as :func:`~marl_note.envs.openspiel.openspiel_env`
    gives it): PSRO's exact best responses join the pool as these. The observation must tell
    apart the information states the policy plays differently (always true of the
    information-state tensor); a ``ValueError`` says so otherwise.

    Example:
        >>> import gymnasium as gym
        >>> from open_spiel.python.policy import TabularPolicy
        >>> from marl_note.envs.openspiel import load_game
        >>> from marl_note.trainers.exploitability import exploitability
        >>> game = load_game("kuhn_poker")
        >>> member = TabularMember(TabularPolicy(game), game, gym.spaces.Discrete(2))  # uniform random
        >>> round(exploitability(member, game).exploitability, 4)
        0.4583
    """

    def __init__(self, policy: Any, game: Any, action_space: Any, observation: str = "observation",
                 name: str = "tabular"):
        from marl_note.envs.openspiel import observation_of, observation_shape

        self.policy, self.action_space, self.observation, self.name = policy, action_space, observation, name
        self.game_name = str(game)
        shape = observation_shape(game, observation)
        self._rows: dict[bytes, int] = {}
        probs = policy.action_probability_array
        for player, keys in enumerate(policy.states_per_player):
            for key in keys:
                row = policy.state_lookup[key]
                obs = observation_of(policy.states[row], player, observation, shape)
                code = np.asarray(obs, dtype=np.float32).tobytes()
                seen = self._rows.setdefault(code, row)
                if seen != row and not np.allclose(probs[seen], probs[row]):
                    raise ValueError(f"in {self.game_name}, the {observation!r} tensor is the same at information "
                                     f"states {policy.states[seen].information_state_string()!r} and {key!r}, "
                                     f"which this policy plays differently: use observation='information_state'")

    def policy_probs(self, obs: Any, mask: np.ndarray | None = None) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        rows = []
        for o in x:
            row = self._rows.get(o.tobytes())
            if row is None:
                raise ValueError(f"TabularMember {self.name!r}: an observation that is no information state of "
                                 f"{self.game_name} ({self.observation!r} tensor)")
            rows.append(row)
        return np.asarray(self.policy.action_probability_array[rows], dtype=np.float64)

    def act(self, obs: Any, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        return np.argmax(self.policy_probs(obs, mask), axis=1).astype(np.int64)

    def __repr__(self) -> str:
        return f"TabularMember({self.name!r}, {self.game_name})"


class MetaStrategyPool(OpponentPool):
    """The :class:`OpponentPool` as PSRO's matchmaker: opponents drawn by a meta-strategy over members.

    Members are fixed opponents (never evicted, no snapshots, no Elo games at tests); each
    training episode the learner sits in a rotating seat against one member drawn with the
    probabilities :meth:`set_meta_strategy` gave (default: uniform over members).

    Example:
        >>> from marl_note.envs.openspiel import openspiel_env
        >>> from marl_note.trainers import DecentralizedTrainer
        >>> trainer = DecentralizedTrainer(lambda: openspiel_env("kuhn_poker"), num_train_envs=1, num_test_envs=1)
        >>> space = trainer.action_space("player_0")
        >>> pool = MetaStrategyPool(RandomAgent(space), trainer.spec, seed=0)
        >>> for name in ("a", "b"):
        ...     _ = pool.add(RandomAgent(space), name=name)
        >>> pool.set_meta_strategy([0.25, 0.75])
        >>> pool.draw_table()
        {'a': 0.25, 'b': 0.75}
    """

    def __init__(self, learner: Any, spec: Any, seed: int | None = None, learner_name: str = "best_response"):
        super().__init__(learner, spec, max_size=1, eval_episodes=1, score_rate=None, seed=seed,
                         learner_name=learner_name, opponent_explore=False)
        self.meta_strategy: np.ndarray | None = None

    def set_meta_strategy(self, probs: Any) -> None:
        """The probability of each member (in :attr:`names` order) as the next episode's opponent."""
        p = np.asarray(probs, dtype=np.float64)
        n = len(self.opponents)
        if p.shape != (n,) or not np.all(np.isfinite(p)) or np.any(p < -1e-9) or abs(p.sum() - 1.0) > 1e-6:
            raise ValueError(f"a meta-strategy must be a probability vector over the {n} pool members, got {p!r}")
        p = np.clip(p, 0.0, None)
        self.meta_strategy = p / p.sum()

    def _probs(self) -> np.ndarray:
        n = len(self.opponents)
        if n == 0:
            raise RuntimeError("the PSRO pool is empty: add a member before training")
        if self.meta_strategy is None or len(self.meta_strategy) != n:
            return np.full(n, 1.0 / n)
        return self.meta_strategy

    def weights(self, names: Sequence[str] | None = None) -> np.ndarray:
        table = dict(zip(self.names, self._probs()))
        w = np.array([table[n] for n in (self.names if names is None else names)])
        return w / w.sum()

    def sample_opponent(self) -> str:
        return self.names[int(self.rng.choice(len(self.opponents), p=self._probs()))]

    def draw_table(self) -> dict[str, float]:
        return {n: float(p) for n, p in zip(self.names, self._probs())}

    def on_train_begin(self, trainer: Any) -> None:
        self._probs()  # refuses an empty pool before training

    def on_collect_end(self, trainer: Any, stats: Any, episodes: int) -> None:
        pass  # no snapshots: members join between iterations

    def on_test_end(self, trainer: Any, result: dict, episodes: int) -> None:
        pass  # no Elo games: PSRO measures members by its payoff matrix

    def on_train_end(self, trainer: Any, out: dict) -> None:
        out["pool"] = self.names
        out["meta_strategy"] = self.draw_table()


# ---------------------------------------------------------------------------------------------- game trees

def _walk(game: Any, arrays: np.ndarray, index: Callable[[Any], int], weights: np.ndarray | None,
          values: np.ndarray | None, mix: np.ndarray | None) -> None:
    """One walk of ``game``'s tree carrying each member's own reach probability per player.

    ``arrays[k, row, a]``: member ``k``'s probability of ``a`` at information-state row ``row``.
    ``values[i, j] +=`` chance x reach of ``i`` as player 0 x reach of ``j`` as player 1 x player 0's
    return; ``mix[row] +=`` the ``weights``-weighted own reach of each member x its row.
    """
    k = arrays.shape[0]

    def visit(state: Any, reach: tuple[np.ndarray, np.ndarray], chance: float) -> None:
        if state.is_terminal():
            if values is not None:
                values.__iadd__(chance * float(state.returns()[0]) * np.outer(reach[0], reach[1]))
            return
        if state.is_chance_node():
            for action, p in state.chance_outcomes():
                visit(state.child(action), reach, chance * p)
            return
        player = state.current_player()
        row = index(state)
        probs = arrays[:, row, :]
        own = reach[player]
        if mix is not None and weights is not None:
            mix[row] += (weights * own) @ probs
        for action in state.legal_actions():
            nxt = own * probs[:, action]
            if not nxt.any():
                continue  # no member plays into this subtree: it adds nothing
            visit(state.child(action), (nxt, reach[1]) if player == 0 else (reach[0], nxt), chance)

    visit(game.new_initial_state(), (np.ones(k), np.ones(k)), 1.0)


def _arrays(policies: Sequence[Any]) -> np.ndarray:
    return np.stack([np.asarray(p.action_probability_array, dtype=np.float64) for p in policies])


def exact_payoffs(policies: Sequence[Any], game: Any) -> np.ndarray:
    """``out[i, j]``: player 0's expected return when policy ``i`` plays player 0 and ``j`` player 1.

    ``policies`` are OpenSpiel ``TabularPolicy`` objects of the two-player ``game`` (as
    :func:`~marl_note.trainers.exploitability.tabular_policy` builds them); the values are exact,
    ``out[i, j] == expected_game_score.policy_value(root, [policies[i], policies[j]])[0]``.
    """
    values = np.zeros((len(policies), len(policies)))
    _walk(game, _arrays(policies), policies[0].state_index, None, values, None)
    return values


def mixture_policy(policies: Sequence[Any], weights: Any, game: Any) -> Any:
    """The behaviour policy of the mixed strategy "play policy ``k`` with probability ``weights[k]``".

    A ``TabularPolicy`` whose row at information state ``s`` of player ``p`` is
    ``sum_k w_k r_k(s) pi_k(.|s) / sum_k w_k r_k(s)``, ``r_k(s)`` being the probability that
    policy ``k``'s own actions lead to ``s`` (reach-weighted, as OpenSpiel's ``PolicyAggregator``).
    A state no weighted policy reaches keeps the first policy's row.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(policies),):
        raise ValueError(f"weights must have one entry per policy ({len(policies)}), got shape {w.shape}")
    arrays = _arrays(policies)
    mix = np.zeros(arrays.shape[1:])
    _walk(game, arrays, policies[0].state_index, w, None, mix)
    out = policies[0].__copy__(copy_action_probability_array=True)
    total = mix.sum(axis=1)
    reached = total > 0
    out.action_probability_array[reached] = mix[reached] / total[reached, None]
    return out


# ---------------------------------------------------------------------------------------------- PSRO

class PSRO:
    """PSRO: best responses trained against the meta-strategy mixture of a growing pool.

    ``trainer``: a :class:`~marl_note.trainers.DecentralizedTrainer` over a two-seat env; its
    ``episodes_per_train`` is the training budget of each best response (its other settings
    apply as in any run). ``make_agent(iteration)`` builds the fresh learner of each iteration
    (one agent playing both seats; ``make_agent(0)`` is called once at construction to check that
    it fits the env and, for an OpenSpiel game, has ``policy_probs``). ``game``: the OpenSpiel game
    of the env (a name such as ``"kuhn_poker"`` or a ``pyspiel.Game``) for exact payoffs and the
    mixture's exploitability; None for another env (payoffs from ``payoff_episodes`` games per pair and seat order, no
    exploitability). ``observation`` names the tensor the env gives (see
    :func:`~marl_note.envs.openspiel.openspiel_env`). ``meta_solver``: ``"nash"`` (linear
    programming), ``"prd"`` (projected replicator dynamics) or ``"uniform"`` (fictitious play), or
    a callable ``payoffs -> probabilities``. ``initial``: the first member (default: a uniform
    random player). ``callbacks``: objects with ``on_iteration_end(psro, logs)``; ``csv_path``
    writes one row per iteration (iteration, episodes, env steps, members, exploitability, NashConv,
    the best-response values below, wall and process CPU seconds, the meta-strategy).

    The best responses' quality. Each iteration logs ``br_value``, what the new member wins
    against the mixture it was trained against (both seats averaged), and in an OpenSpiel game
    ``br_exact_value``, what OpenSpiel's exact best response wins there (the mixture's
    exploitability before the member joined), and ``br_gap``, their difference: 0 for a perfect
    best response; what a trained one leaves on the table.

    ``best_response="exact"`` (OpenSpiel games only) replaces the trained learner by OpenSpiel's
    best response to the mixture, per seat, as the new member (a :class:`TabularMember`; no
    training, ``make_agent`` unused): PSRO with an exact oracle, a reference for the trained
    runs rather than reinforcement learning.

    Example:
        >>> from marl_note.agents.torch import DQN
        >>> from marl_note.envs.openspiel import openspiel_env
        >>> from marl_note.trainers import DecentralizedTrainer
        >>> trainer = DecentralizedTrainer(lambda: openspiel_env("kuhn_poker"), num_train_envs=2, num_test_envs=1,
        ...                                episodes_per_train=40, episodes_per_test=2, test_freq=1000, seed=0)
        >>> spaces = trainer.observation_space("player_0"), trainer.action_space("player_0")
        >>> psro = PSRO(trainer, lambda i: DQN(*spaces, hidden_sizes=(16,), seed=i), game="kuhn_poker", seed=0)
        >>> history = psro.run(iterations=1)
        >>> psro.names, len(psro.meta_strategy), history[-1]["exploitability"] > 0
        (['random', 'br_1'], 2, True)
    """

    def __init__(self, trainer: Any, make_agent: Callable[[int], Any] | None, game: Any = None,
                 observation: str = "observation", meta_solver: str | Callable[[Any], np.ndarray] = "nash",
                 payoff_episodes: int = 100, initial: Any = None, callbacks: Sequence[Any] = (),
                 csv_path: str | os.PathLike | None = None, seed: int | None = None,
                 best_response: str = "trained"):
        spec = trainer.spec
        if best_response not in ("trained", "exact"):
            raise ValueError(f"best_response must be 'trained' or 'exact', got {best_response!r}")
        if best_response == "trained" and not callable(make_agent):
            raise TypeError(f"make_agent must be a callable iteration -> agent, got {make_agent!r}")
        if best_response == "exact" and game is None:
            raise ValueError("best_response='exact' computes OpenSpiel's best response: it needs an OpenSpiel game "
                             "(PSRO(game=...))")
        self.best_response = best_response
        if spec.num_agents != 2:
            raise ValueError(f"PSRO needs a two-player game; the env has {spec.num_agents} seats "
                             f"({spec.possible_agents})")
        self.game = None
        if game is not None:
            from marl_note.envs.openspiel import load_game, observation_shape

            self.game = load_game(game, observation)  # refuses a game that is not two-player zero-sum
            shape = observation_shape(self.game, observation)
            env_shape = trainer.observation_space(spec.possible_agents[0]).shape  # None for a space without one
            if env_shape is not None and tuple(env_shape) != shape:
                raise ValueError(f"the env's observations have shape {tuple(env_shape)} but OpenSpiel game "
                                 f"{str(self.game)!r} gives {shape} for observation={observation!r}: "
                                 f"the env is not that game with that observation")
        self.solver = meta_solver if callable(meta_solver) else _named_solver(meta_solver)
        self.solver_name = (meta_solver if isinstance(meta_solver, str)
                            else meta_solver.__name__ if inspect.isfunction(meta_solver) else "custom")
        if int(payoff_episodes) < 1:
            raise ValueError(f"payoff_episodes must be >= 1, got {payoff_episodes}")
        for cb in callbacks:
            if not callable(getattr(cb, "on_iteration_end", None)):
                raise TypeError(f"PSRO callback {type(cb).__name__} has no on_iteration_end(psro, logs) method")
        self.trainer, self.make_agent, self.observation = trainer, make_agent, observation
        self.payoff_episodes, self.callbacks, self.seed = int(payoff_episodes), list(callbacks), seed
        self.csv_path = None if csv_path is None else os.fspath(csv_path)
        space = trainer.action_space(spec.possible_agents[0])
        first = initial if initial is not None else RandomAgent(space, seed=seed)
        self.pool = MetaStrategyPool(first, spec, seed=seed)
        self.members: dict[str, Any] = {}
        self._policies: list[Any] = []
        self.values = np.zeros((0, 0))  # values[i, j]: seat 0's expected return, i in seat 0, j in seat 1
        self.history: list[dict[str, Any]] = []
        self.iteration = 0
        self._last_exploitability: Any = None  # the current mixture's, once measured
        if make_agent is not None and best_response == "trained":
            self._check_learner(make_agent(0))  # a learner that cannot serve is refused before any training
        self._add("random" if initial is None else "initial", first)
        self._solve()

    def _check_learner(self, learner: Any) -> None:
        if self.game is not None and not isinstance(learner, ActionProbabilities):
            raise TypeError(f"make_agent built a {type(learner).__name__}, which has no policy_probs(obs, mask); "
                            f"PSRO in an OpenSpiel game needs it")
        self.pool._check_spaces(learner, "the best response", range(self.pool.spec.num_agents))

    # ------------------------------------------------------------------ pool and meta-game
    @property
    def names(self) -> list[str]:
        return list(self.members)

    @property
    def payoffs(self) -> np.ndarray:
        """``payoffs[i, j]``: member ``i``'s expected return against ``j``, both seat orders averaged."""
        return 0.5 * (self.values - self.values.T)

    @property
    def meta_strategy(self) -> np.ndarray:
        return self.pool._probs()

    def _policy(self, agent: Any, name: str) -> Any:
        from marl_note.trainers.exploitability import tabular_policy

        if not isinstance(agent, ActionProbabilities):
            raise TypeError(f"PSRO member {name!r} ({type(agent).__name__}) has no policy_probs(obs, mask); "
                            f"exact payoffs and exploitability in an OpenSpiel game need it")
        return tabular_policy(agent, self.game, observation=self.observation)

    def _add(self, name: str, agent: Any) -> None:
        if not isinstance(agent, Acting):
            raise TypeError(f"PSRO member {name!r} ({type(agent).__name__}) has no act(obs, mask, explore) method")
        seed = None if self.seed is None else self.seed + 1000 * (len(self.members) + 1)
        member = PolicyMember(agent, name, seed=seed)
        if self.game is not None:
            self._policies.append(self._policy(agent, name))
        self.pool.add(member, name=name)
        self.members[name] = agent
        self._extend()

    def _extend(self) -> None:
        if self.game is not None:
            self.values = exact_payoffs(self._policies, self.game)
            return
        n = len(self.members)
        values = np.zeros((n, n))
        values[: n - 1, : n - 1] = self.values
        players = [self.pool.opponents[name] for name in self.names]
        new = n - 1
        for i in range(n):
            for a, b in {(new, i), (i, new)}:  # both seat orders; one for the new member against itself
                rewards = np.asarray(self.trainer.test([players[a], players[b]],
                                                       episodes=self.payoff_episodes)["rewards"])
                values[a, b] = float(rewards[:, 0].mean())
        self.values = values

    def _solve(self) -> None:
        probs = np.asarray(self.solver(self.payoffs), dtype=np.float64)
        self.pool.set_meta_strategy(probs)
        self._last_exploitability = None

    def mixture(self) -> Any:
        """The mixture's behaviour policy (an OpenSpiel ``TabularPolicy``; OpenSpiel games only)."""
        if self.game is None:
            raise ValueError("the mixture's policy needs an OpenSpiel game (PSRO(game=...))")
        return mixture_policy(self._policies, self.meta_strategy, self.game)

    def exploitability(self) -> Any:
        """The :class:`~marl_note.trainers.exploitability.Exploitability` of the meta-strategy mixture."""
        from marl_note.trainers.exploitability import policy_exploitability

        return policy_exploitability(self.mixture(), self.game)

    def _exact_best_response(self, name: str) -> TabularMember:
        """OpenSpiel's best response to the current mixture in each seat, as one pool member."""
        import pyspiel

        game = self.game
        assert game is not None  # best_response="exact" was refused without a game
        mixture = self.mixture()
        probs, legal = mixture.action_probability_array, mixture.legal_actions_mask
        table = {key: [(int(a), float(probs[row, a])) for a in np.flatnonzero(legal[row])]
                 for key, row in mixture.state_lookup.items()}
        out = mixture.__copy__(copy_action_probability_array=True)
        out.action_probability_array[:] = 0.0
        for player in range(game.num_players()):
            actions = pyspiel.TabularBestResponse(game, player, table).get_best_response_actions()
            for key in mixture.states_per_player[player]:
                row = mixture.state_lookup[key]
                action = actions.get(key)  # every information state of the player has one; else the first legal
                out.action_probability_array[row, np.flatnonzero(legal[row])[0] if action is None else action] = 1.0
        space = self.trainer.action_space(self.pool.spec.possible_agents[0])
        return TabularMember(out, game, space, observation=self.observation, name=name)

    def _mixture_exploitability(self) -> Any:
        """:meth:`exploitability` of the current mixture, measured once per meta-strategy."""
        if self._last_exploitability is None:
            self._last_exploitability = self.exploitability()
        return self._last_exploitability

    # ------------------------------------------------------------------ the loop
    def run(self, iterations: int, max_seconds: float | None = None) -> list[dict[str, Any]]:
        """Run ``iterations`` PSRO iterations (fewer when ``max_seconds`` of process CPU time are spent);
        returns :attr:`history`, one dict per iteration."""
        if int(iterations) < 1:
            raise ValueError(f"iterations must be >= 1, got {iterations}")
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(int(iterations)):
            self.step()
            if max_seconds is not None and time.process_time() - start_cpu >= max_seconds:
                break
        self.history[-1].setdefault("run_wall_seconds", time.perf_counter() - start_wall)
        return self.history

    def step(self) -> dict[str, Any]:
        """One iteration: train a best response to the mixture, add it, re-solve, measure."""
        wall, cpu = time.perf_counter(), time.process_time()
        self.iteration += 1
        name = f"br_{self.iteration}"
        opponents = self.meta_strategy.copy()  # the mixture the best response is trained against
        exact = None if self.game is None else self._mixture_exploitability()
        if self.best_response == "exact":
            stats: dict[str, Any] = {"num_collected_episodes": 0, "num_collected_steps": 0}
            self._add(name, self._exact_best_response(name))
        else:
            assert self.make_agent is not None  # refused at construction
            learner = self.make_agent(self.iteration)
            self._check_learner(learner)
            self.pool.learner = learner
            stats = self.trainer.train([learner, learner], learning_mask=[1, 1], plot=False, progress=False,
                                       matchmaker=self.pool, callbacks=[self.pool], baseline=None)
            self._add(name, snapshot(learner, name).agent)
        logs: dict[str, Any] = {"iteration": self.iteration, "members": len(self.members),
                                "episodes": int(stats["num_collected_episodes"]),
                                "env_steps": int(stats.get("num_collected_steps", 0)),
                                # what the new member wins against the mixture it was trained against,
                                # both seats averaged (exact in an OpenSpiel game; a payoff-matrix row)
                                "br_value": float(self.payoffs[-1, :-1] @ opponents)}
        if exact is not None:
            # what a best response wins there (OpenSpiel's, both seats averaged: the mixture's
            # exploitability before the new member joined), and what the trained one fell short by
            logs.update(br_exact_value=exact.exploitability, br_gap=exact.exploitability - logs["br_value"])
        self._solve()
        logs["meta_strategy"] = self.meta_strategy.tolist()
        if self.game is not None:
            e = self.exploitability()
            self._last_exploitability = e
            logs.update(exploitability=e.exploitability, nash_conv=e.nash_conv)
        logs.update(wall_seconds=time.perf_counter() - wall, cpu_seconds=time.process_time() - cpu)
        self.history.append(logs)
        self._write_csv(logs)
        for cb in self.callbacks:
            cb.on_iteration_end(self, logs)
        return logs

    def _write_csv(self, logs: dict[str, Any]) -> None:
        if self.csv_path is None:
            return
        import csv

        fresh = len(self.history) == 1
        with open(self.csv_path, "w" if fresh else "a", newline="") as f:
            w = csv.writer(f)
            if fresh:
                w.writerow(CSV_COLUMNS)
            w.writerow([logs.get(c, "") if c != "meta_strategy" else " ".join(f"{p:.4f}" for p in logs[c])
                        for c in CSV_COLUMNS])

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | os.PathLike) -> str:
        """Write the pool to directory ``path``: each member's agent checkpoint under ``members/<name>``
        (manifest.json + npz), and ``psro.json`` (names, meta-strategy, payoffs, game, history)."""
        return save_population(path, self.members, self.meta_strategy, self.values, game=self.game,
                               observation=self.observation, meta_solver=self.solver_name, history=self.history)


CSV_COLUMNS = ("iteration", "episodes", "env_steps", "members", "exploitability", "nash_conv", "br_value",
               "br_exact_value", "br_gap", "wall_seconds", "cpu_seconds", "meta_strategy")


def _named_solver(name: str) -> Callable[[Any], np.ndarray]:
    if not isinstance(name, str) or name not in META_SOLVERS:
        raise ValueError(f"unknown meta-solver {name!r}; choose one of {sorted(META_SOLVERS)} or pass a callable")
    return meta_solver(name)


# ---------------------------------------------------------------------------------------------- saved pools

class PSROPopulation:
    """A saved PSRO pool: members (restored agents), their meta-strategy and payoffs.

    ``exploitability()`` measures the meta-strategy mixture exactly for an OpenSpiel game.
    """

    def __init__(self, members: dict[str, Any], meta_strategy: np.ndarray, values: np.ndarray,
                 game: str | None, observation: str, meta_solver: str, history: list[dict[str, Any]]):
        self.members, self.meta_strategy, self.values = members, meta_strategy, values
        self.game, self.observation, self.meta_solver, self.history = game, observation, meta_solver, history

    @property
    def names(self) -> list[str]:
        return list(self.members)

    def exploitability(self) -> Any:
        if self.game is None:
            raise ValueError("this PSRO pool was not trained on an OpenSpiel game: it has no exact exploitability")
        from marl_note.envs.openspiel import load_game
        from marl_note.trainers.exploitability import policy_exploitability, tabular_policy

        game = load_game(self.game, self.observation)
        policies = [tabular_policy(a, game, observation=self.observation) for a in self.members.values()]
        return policy_exploitability(mixture_policy(policies, self.meta_strategy, game), game)


def save_population(path: str | os.PathLike, members: dict[str, Any], meta_strategy: Any, values: Any,
                    game: Any = None, observation: str = "observation", meta_solver: str = "nash",
                    history: Sequence[dict[str, Any]] = ()) -> str:
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"a PSRO checkpoint is a directory; {path} is a file")
    if os.path.isdir(path) and not set(os.listdir(path)) <= {PSRO_FILE, "psro.csv", "members"}:
        raise ValueError(f"{path} is neither empty nor a PSRO checkpoint; refusing to write into it")
    os.makedirs(os.path.join(path, "members"), exist_ok=True)
    entries = []
    for name, agent in members.items():
        if isinstance(agent, RandomAgent):
            entries.append({"name": name, "kind": "random"})
            continue
        if isinstance(agent, TabularMember):  # an exact best response: its table, one row per information state
            entries.append({"name": name, "kind": "tabular",
                            "probs": np.asarray(agent.policy.action_probability_array).tolist()})
            continue
        if not isinstance(agent, Saving):
            raise TypeError(f"PSRO member {name!r} ({type(agent).__name__}) cannot be saved: it is not a "
                            f"checkpointing agent of this library (marl_note.agents.checkpoints.saving.Saving)")
        agent.save(os.path.join(path, "members", name))
        entries.append({"name": name, "kind": "agent", "path": f"members/{name}"})
    record = {"format": PSRO_FORMAT, "members": entries,
              "meta_strategy": [float(p) for p in np.asarray(meta_strategy)],
              "values": np.asarray(values, dtype=np.float64).tolist(),
              "game": None if game is None else str(game), "observation": observation,
              "meta_solver": meta_solver, "history": list(history)}
    tmp = os.path.join(path, PSRO_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, os.path.join(path, PSRO_FILE))
    return path


def is_psro_checkpoint(path: str | os.PathLike) -> bool:
    return os.path.isfile(os.path.join(os.fspath(path), PSRO_FILE))


def load_psro(path: str | os.PathLike, backend: str | None = None, action_space: Any = None) -> PSROPopulation:
    """Load a pool :meth:`PSRO.save` wrote; agent members are restored for ``backend`` (default: as saved).

    A random member needs its ``action_space``: taken from another member when not given.
    """
    from marl_note.agents.checkpoints.restoring import restore

    path = os.fspath(path)
    file = os.path.join(path, PSRO_FILE)
    if not os.path.isfile(file):
        raise ValueError(f"{path} is not a PSRO checkpoint (no {PSRO_FILE})")
    with open(file) as f:
        record = json.load(f)
    if not isinstance(record, dict) or record.get("format") != PSRO_FORMAT:
        raise ValueError(f"{file} is not a PSRO checkpoint of this version (format {record.get('format')!r})")
    members: dict[str, Any] = {}
    for entry in record["members"]:
        if entry["kind"] == "agent":
            rel = os.path.normpath(entry["path"])
            if rel.startswith("..") or os.path.isabs(rel):
                raise ValueError(f"{file}: member path {entry['path']!r} leaves the checkpoint directory")
            members[entry["name"]] = restore(os.path.join(path, rel), backend=backend)
    tabular = [e for e in record["members"] if e["kind"] == "tabular"]
    if tabular:
        from open_spiel.python.policy import TabularPolicy

        from marl_note.envs.openspiel import load_game

        if record.get("game") is None:
            raise ValueError(f"{file}: a tabular member needs the OpenSpiel game, which the checkpoint does not name")
        observation = record.get("observation", "observation")
        game = load_game(record["game"], observation)
        actions = action_space if action_space is not None else gym.spaces.Discrete(game.num_distinct_actions())
        for entry in tabular:
            policy = TabularPolicy(game)
            probs = np.asarray(entry["probs"], dtype=np.float64)
            if probs.shape != policy.action_probability_array.shape:
                raise ValueError(f"{file}: tabular member {entry['name']!r} has a table of shape {probs.shape}, "
                                 f"{record['game']} needs {policy.action_probability_array.shape}")
            policy.action_probability_array[:] = probs
            members[entry["name"]] = TabularMember(policy, game, actions, observation=observation, name=entry["name"])
    for entry in record["members"]:
        if entry["kind"] == "random":
            space = action_space
            if space is None:
                space = next((a.action_space for a in members.values()), None)
            if space is None:
                raise ValueError(f"{file}: a random member needs an action_space (no other member to take it from)")
            members[entry["name"]] = RandomAgent(space)
    members = {e["name"]: members[e["name"]] for e in record["members"]}
    meta = np.asarray(record["meta_strategy"], dtype=np.float64)
    if meta.shape != (len(members),):
        raise ValueError(f"{file}: the meta-strategy has {meta.size} entries for {len(members)} members")
    return PSROPopulation(members, meta, np.asarray(record["values"], dtype=np.float64), record.get("game"),
                          record.get("observation", "observation"), record.get("meta_solver", "nash"),
                          record.get("history", []))
