"""Training a zoo recipe: the env (wrapped), the trainer, the seats and the agents, built as ``train`` builds them.

:func:`prepare` checks a :class:`~marl_note.cli.zoo.Recipe` and builds everything with the command
line's own pieces (:func:`~marl_note.cli.envs.resolve_env`, :func:`~marl_note.cli.agents.plan_seats`,
:func:`~marl_note.cli.agents.build_learners`), importing the one backend last; the returned
:class:`RecipeRun` trains within the recipe's budget (:class:`~marl_note.trainers.budget.Budget`: env steps, minutes and
episodes, whichever ends first) and scores the result: the mean greedy return over the scored
seats, next to random players in every seat, and for board games each seat's win/draw/loss
against a random player. :func:`train_recipe` does all of it in one call.

Example:
    >>> from marl_note.cli.zoo import recipe
    >>> stats = train_recipe(recipe("CartPole-v1"), env_steps=300, minutes=None, seed=0)
    >>> stats["recipe"] == recipe("CartPole-v1").label, stats["num_collected_steps"] >= 300
    (True, True)
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marl_note.cli.agents import build_learners, check_algorithm, import_backend, plan_seats, seat_agents
from marl_note.cli.common import CLIError, setup_errors
from marl_note.cli.envs import EnvChoice, resolve_env
from marl_note.cli.results import seat_results
from marl_note.cli.zoo import Recipe, RecipeError
from marl_note.trainers.budget import Budget
from marl_note.validation import MAX_SEED, shown

__all__ = ["RecipeRun", "WrappedEnv", "prepare", "train_recipe", "wrap_choice"]

EPISODE_CAP = 10_000_000  # the trainer's episode count when a budget names none (env steps or minutes end it)


@dataclass(frozen=True)
class WrappedEnv:
    """An env factory with the recipe's wrappers around it, innermost first (picklable for worker processes).

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> make = WrappedEnv(simple_spread_v3.parallel_env, ({"name": "with_agent_id"},))
        >>> make().observation_space("agent_0").shape
        (21,)
    """

    factory: Any
    wrappers: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    def __call__(self) -> Any:
        env = self.factory()
        for spec in self.wrappers:
            env = _apply(spec, env)
        return env


def _apply(spec: Mapping[str, Any], env: Any) -> Any:
    from marl_note.envs import pad_seats, with_agent_id

    name, options = spec["name"], {k: v for k, v in spec.items() if k != "name"}
    if name == "with_agent_id":
        return with_agent_id(lambda: env)()
    if name == "pad_seats":
        return pad_seats(lambda: env, **options)()
    from marl_note.cli.wrappers import check_supersuit_wrapper

    check_supersuit_wrapper(name.partition(".")[2], list(options), f"the wrapper {name}")  # a fixed list, by name
    try:
        import supersuit
    except ImportError:
        raise ImportError(f"the wrapper {name} needs SuperSuit: pip install supersuit (or marl_note[supersuit])") \
            from None
    wrapper = getattr(supersuit, name.partition(".")[2], None)
    if wrapper is None:
        raise ValueError(f"SuperSuit has no wrapper {name.partition('.')[2]!r}")
    return wrapper(env, **options)


def wrap_choice(choice: EnvChoice, wrappers: Sequence[Mapping[str, Any]]) -> EnvChoice:
    """``choice`` with its factory wrapped (unchanged when there are no wrappers)."""
    if not wrappers:
        return choice
    return EnvChoice(choice.name, choice.family, WrappedEnv(choice.factory, tuple(dict(w) for w in wrappers)),
                     choice.kwargs)


class _StopAt:
    """``stop_fn``: stop once a test metric reaches the threshold (picklable)."""

    def __init__(self, threshold: float):
        self.threshold = float(threshold)

    def __call__(self, metric: float, episodes: int) -> bool:
        return bool(metric >= self.threshold)


@dataclass
class RecipeRun:
    """A recipe built and ready: ``train()``, then ``score()`` / ``random_score()``; ``close()`` the envs.

    Example:
        >>> from marl_note.cli.zoo import recipe
        >>> run = prepare(recipe("CartPole-v1").with_budget(env_steps=100, minutes=None), seed=0)
        >>> run.plan.mode, run.board_game, sorted(run.learners)
        ('independent', False, ['agent_0'])
        >>> run.random_score(episodes=2)["episodes"]
        2
        >>> run.close()
    """

    recipe: Recipe
    seed: int
    backend: str
    trainer: Any
    plan: Any
    learners: dict[str, Any]
    seats: list[Any]

    @property
    def board_game(self) -> bool:
        return bool(self.trainer.spec.turn_based and self.trainer.spec.num_agents > 1)

    def train(self, progress: bool = False, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
        budget = self.recipe.budget
        stats = self.trainer.train(self.seats, learning_mask=[s in self.plan.learners
                                                              for s in self.trainer.possible_agents],
                                   plot=False, progress=progress,
                                   callbacks=[Budget(budget.get("env_steps"), budget.get("minutes")), *callbacks])
        stats["recipe"] = self.recipe.label
        return stats

    def _scored(self) -> list[str]:
        names = list(self.trainer.possible_agents)
        return [s for s in names if s in self.recipe.score_seats] if self.recipe.score_seats else names

    def _random(self) -> dict[str, Any]:
        from marl_note.trainers.evaluation import baseline_opponents

        return baseline_opponents(self.trainer.spec, "random", seed=self.seed + 55_555)

    def score(self, episodes: int = 100) -> dict[str, Any]:
        """Greedy episodes of the trained seats: ``score`` (mean return over the scored seats), per-seat means,
        and for board games ``per_seat`` win/draw/loss against a random player in the other seat."""
        if self.board_game:
            ours = {s: a for s, a in zip(self.trainer.possible_agents, self.seats) if s in self.plan.learners}
            per_seat = seat_results(self.trainer, ours, self._random(), episodes)
            return {"score": float(np.mean([r["mean_return"] for r in per_seat.values()])), "per_seat": per_seat}
        return self._returns(self.seats, episodes)

    def random_score(self, episodes: int = 100) -> dict[str, Any]:
        """The same measurement with random players in every seat (for board games: random against random)."""
        players = self._random()
        if self.board_game:
            names = list(self.trainer.possible_agents)
            per_seat = {}
            for seat in names:  # one random player in ``seat``, others random too (fresh seeds)
                per_seat.update(seat_results(self.trainer, {seat: players[seat]}, self._random(), episodes))
            return {"score": float(np.mean([r["mean_return"] for r in per_seat.values()])), "per_seat": per_seat}
        return self._returns([players[s] for s in self.trainer.possible_agents], episodes)

    def _returns(self, seats: list[Any], episodes: int) -> dict[str, Any]:
        rewards = np.asarray(self.trainer.test(seats, episodes=episodes)["rewards"], dtype=np.float64)
        names = list(self.trainer.possible_agents)
        means = {s: float(rewards[:, k].mean()) for k, s in enumerate(names)}
        scored = [names.index(s) for s in self._scored()]
        per_episode = rewards[:, scored].mean(axis=1)
        return {"score": float(per_episode.mean()), "std": float(per_episode.std()), "mean_return": means,
                "episodes": int(len(rewards))}

    def close(self) -> None:
        self.trainer.close()


def prepare(recipe: Recipe, seed: int | None = None, backend: str = "torch", processes: int | None = None,
            agent_kwargs: Mapping[str, Any] | None = None) -> RecipeRun:
    """Build the recipe's env, trainer and agents (``seed`` default: the recipe's first seed).

    ``agent_kwargs`` override the recipe's agent options. Every check runs before the backend is
    imported; a problem raises a :class:`~marl_note.cli.zoo.RecipeError` naming the recipe.
    """
    seed = recipe.seeds[0] if seed is None else int(seed)
    if not 0 <= seed <= MAX_SEED:
        raise RecipeError(f"recipe {recipe.path}: seed must be an integer from 0 to {MAX_SEED:,}, got "
                          f"{shown(seed)}")
    options = dict(recipe.trainer)
    kwargs = {**recipe.agent_kwargs(), **dict(agent_kwargs or {})}
    with _recipe_errors(recipe):
        choice = wrap_choice(resolve_env(recipe.env, recipe.env_kwargs), recipe.wrappers)
        num_envs = options.get("num_envs", 16)
        from marl_note.trainers import DecentralizedTrainer

        stop = options.get("stop_reward")
        trainer = DecentralizedTrainer(choice.factory, num_train_envs=num_envs, num_test_envs=num_envs,
                                       batch_size=options.get("batch_size", 64),
                                       update_freq=options.get("update_freq", 100), test_freq=options["test_freq"],
                                       episodes_per_train=recipe.budget.get("episodes", EPISODE_CAP),
                                       episodes_per_test=options.get("test_episodes", 10), seed=seed,
                                       processes=processes if processes is not None else options.get("processes"),
                                       stop_fn=None if stop is None else _StopAt(stop))
    try:
        with _recipe_errors(recipe):
            spec = trainer.spec
            plan = plan_seats(spec, recipe.algo, self_play=recipe.seats == "self-play")
            check_algorithm(recipe.algo, spec, recipe.env, plan.learners)
            if recipe.score_seats:
                unknown = [s for s in recipe.score_seats if s not in spec.possible_agents]
                if unknown:
                    raise RecipeError(f"score_seats names {unknown}, which are no seats of {recipe.env} "
                                      f"({', '.join(spec.possible_agents)})")
            if backend == "auto":  # numpy where bench/ measured it faster, else torch (never tf)
                from marl_note.agents.backend_choice import choose_backend

                backend = choose_backend(recipe.algo, options=kwargs,
                                         observation_spaces=[spec.observation_space(s) for s in plan.learners]).backend
            import_backend(backend)
            learners = build_learners(backend, recipe.algo, spec, plan, kwargs, seed)
            seats = seat_agents(plan, learners, {})
    except BaseException:
        trainer.close()
        raise
    return RecipeRun(recipe, seed, backend, trainer, plan, learners, seats)


@contextlib.contextmanager
def _recipe_errors(recipe: Recipe) -> Iterator[None]:
    """setup_errors naming the recipe, raised as a RecipeError (a missing env package included)."""
    what = f"recipe {recipe.path}"
    try:
        with setup_errors(what):
            yield
    except RecipeError:
        raise
    except CLIError as exc:  # from setup_errors (already named) or from resolve_env
        raise RecipeError(str(exc) if str(exc).startswith(what) else f"{what}: {exc}") from exc


def train_recipe(recipe: Recipe | str, seed: int | None = None, backend: str = "torch", *,
                 env_steps: int | None | str = "recipe", minutes: float | None | str = "recipe",
                 episodes: int | None | str = "recipe", progress: bool = False,
                 agent_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Train ``recipe`` (a :class:`Recipe` or an env name with a shipped recipe); returns the trainer's stats.

    ``env_steps``, ``minutes`` and ``episodes`` override the recipe's budget (None removes that limit);
    ``seed`` and ``backend`` (``"torch"``, ``"tf"``, ``"numpy"`` or ``"auto"``:
    :func:`~marl_note.agents.backend_choice.choose_backend`) pick the run; the stats gain ``recipe``.
    """
    if isinstance(recipe, str):
        from marl_note.cli.zoo import recipe as find

        recipe = find(recipe)
    changes = {k: v for k, v in (("env_steps", env_steps), ("minutes", minutes), ("episodes", episodes))
               if not (isinstance(v, str) and v == "recipe")}
    if changes:
        recipe = recipe.with_budget(**changes)
    run = prepare(recipe, seed=seed, backend=backend, agent_kwargs=agent_kwargs)
    try:
        return run.train(progress=progress)
    finally:
        run.close()

