"""The ``train``, ``evaluate`` and ``play`` commands: check everything, then do the work.

Each command first checks its arguments (env name, algorithm fit, seats, output directory,
checkpoints) and only then imports the one backend it needs; a CLIError raised on the way is
printed as one line by :func:`marl_note.cli.main`.

Example:
    >>> import contextlib, io
    >>> from marl_note.cli import main
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     status = main(["evaluate", "--env", "tictactoe_v3", "--checkpoint", "no/such/dir"])
    >>> status, err.getvalue().strip()
    (2, 'marl_note evaluate: error: --checkpoint no/such/dir does not exist')
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from marl_note.agents.threads import DEFAULT_THREADS, describe_threads, use_threads
from marl_note.cli.agents import build_learners, check_agent_kwargs, check_algorithm, import_backend, plan_seats
from marl_note.cli.agents import seat_agents as arrange_seats
from marl_note.cli.common import CLIError, parse_assignments, setup_errors
from marl_note.cli.envs import EnvChoice, canonical_env_name, resolve_env
from marl_note.cli.limits import check_settings
from marl_note.cli.results import is_board_game, random_players, seat_results
from marl_note.cli.runs import (
    PLOT_FILE,
    SaveBest,
    Source,
    check_out_dir,
    check_source_fits,
    clear_earlier_run,
    inspect_checkpoint,
    load_source,
    write_run,
)
from marl_note.cli.wrappers import parse_wrappers
from marl_note.types import NonFiniteError

__all__ = ["evaluate", "play", "train"]


def _say(text: str) -> None:
    print(text, flush=True)


def _report(results: Mapping[str, Any], spec: Any, ours: Any, against: str) -> None:
    if is_board_game(spec):
        _say(f"greedy games against {against}:")
        for seat, r in results.items():
            _say(f"  as {seat}: win {r['win']:.1%}, draw {r['draw']:.1%}, loss {r['loss']:.1%} "
                 f"({r['episodes']} games, mean return {r['mean_return']:+.3f})")
        return
    n = next(iter(results.values()))["episodes"]
    _say(f"greedy episodes: {n}; mean return per seat" + (f" (other seats: {against})" if
                                                           len(ours) < len(results) else "") + ":")
    for seat, r in results.items():
        _say(f"  {seat}{'' if seat in ours else ' (opponent)'}: {r['mean_return']:.3f}")


def _report_team(choice: EnvChoice, results: Mapping[str, Any]) -> None:
    """A fully cooperative OpenSpiel game: print the team's score (every seat gets the same return)."""
    from marl_note.cli.envs import OPENSPIEL_COOPERATIVE

    if choice.family == OPENSPIEL_COOPERATIVE and results:
        scores = [r["mean_return"] for r in results.values()]
        _say(f"team score: {sum(scores) / len(scores):.3f} (mean game score of {choice.name}, a fully cooperative "
             f"game: every seat's return)")


def _openspiel_game(choice: EnvChoice) -> tuple[Any, str] | None:
    """``(pyspiel game, observation)`` of an OpenSpiel env choice (unwrapped), else None."""
    if choice.family != "openspiel":
        return None
    from marl_note.cli.envs import OPENSPIEL_PREFIX
    from marl_note.envs.openspiel import load_game

    params = {k: v for k, v in choice.kwargs.items() if k not in ("observation", "render_mode")}
    observation = choice.kwargs.get("observation", "observation")
    return load_game(choice.name[len(OPENSPIEL_PREFIX):], observation, **params), observation


def _exploitability_callback(choice: EnvChoice, seats: list[Any]) -> list[Any]:
    """An ExploitabilityCallback (measured at each test) for an OpenSpiel game whose seats all have policy_probs."""
    from marl_note.agents.base import ActionProbabilities

    found = _openspiel_game(choice)
    if found is None or not all(isinstance(a, ActionProbabilities) for a in seats):
        return []
    from marl_note.trainers.exploitability import ExploitabilityCallback

    return [ExploitabilityCallback(found[0], observation=found[1])]


def _report_exploitability(choice: EnvChoice, seats: Mapping[str, Any], ours: Mapping[str, Any]) -> float | None:
    """Print the exact exploitability of the seats' policies in an OpenSpiel game (else nothing)."""
    found = _openspiel_game(choice)
    if found is None:
        return None
    from marl_note.agents.base import ActionProbabilities
    from marl_note.trainers.exploitability import exploitability

    game, observation = found
    lacking = [s for s, a in seats.items() if not isinstance(a, ActionProbabilities)]
    if lacking:
        _say(f"exploitability: not available ({', '.join(lacking)} has no policy_probs)")
        return None
    result = exploitability(dict(seats), game, observation=observation)
    others = [s for s in seats if s not in ours]
    _say(f"exploitability: {result.exploitability:.4f} (NashConv {result.nash_conv:.4f}; a best response wins "
         + ", ".join(f"{v:+.4f} as {s}" for s, v in zip(seats, result.best_response_values))
         + f"), exact over every information state of {game}"
         + (f" ({', '.join(others)}: a random player)" if others else ""))
    return result.exploitability


def _env(name: str | None, source: Source | None, env_args: list[str] | None) -> EnvChoice:
    kwargs = parse_assignments(env_args, "--env-arg")
    if name is None:
        if source is None or source.env is None:
            raise CLIError("--env is required: the checkpoint is a single agent, which does not record its env")
        name, kwargs = source.env, {**source.env_kwargs, **kwargs}
    elif source is not None and source.env is not None and canonical_env_name(name) == source.env and not kwargs:
        name = source.env  # the run's env, however it is typed (tictactoe_v3, classic/tictactoe-v3)
        kwargs = dict(source.env_kwargs)
    choice = resolve_env(name, kwargs)
    if source is not None and source.env == choice.name and source.record.get("wrappers"):
        from marl_note.cli.zoo_run import wrap_choice  # the run's wrappers (a recipe's, --wrapper), as it was trained

        choice = wrap_choice(choice, source.record["wrappers"])
    return choice


def _threads(args: Any) -> int:
    """The intra-op thread count of a command: ``--threads``, else one (see :mod:`marl_note.agents.threads`)."""
    return int(args.threads) if getattr(args, "threads", None) is not None else DEFAULT_THREADS


def _use_source_threads(args: Any, source: Source) -> None:
    """Set the threads of the backends ``source`` loads into, before its checkpoints are restored."""
    backends = {args.backend} if args.backend else {m["backend"] for _, m in source.manifests.values()}
    for backend in sorted(b for b in backends if b in ("torch", "tf")):
        import_backend(backend)  # a CLIError saying what to install when it cannot be imported
        use_threads(_threads(args), backend=backend, interop=True)


def _trainer(choice: EnvChoice, num_envs: int, **options: Any) -> Any:
    """The trainer over ``choice`` (``num_envs``: the value of --num-envs, named when too many envs do not fit)."""
    from marl_note.replay import InsufficientMemoryError
    from marl_note.trainers import DecentralizedTrainer

    try:
        with setup_errors(f"cannot build env {choice.name}"):
            return DecentralizedTrainer(choice.factory, **options)
    except CLIError as exc:
        if isinstance(exc.__cause__, InsufficientMemoryError):
            raise CLIError(f"--num-envs {num_envs} is too many: {exc.__cause__}") from None
        raise


def _check_backend(algo: str, backend: str) -> None:
    """Refuse a backend the algorithm has no class in (the numpy backend has some algorithms only)."""
    from marl_note.agents.registry import get

    have = get(algo).backends
    if backend not in have:
        raise CLIError(f"--backend {backend} has no {algo} yet; {algo} runs with --backend {' or '.join(have)}")


def _opponents(spec: Any, env_name: str, backend: str | None, seed: int | None,
               source: Source | None) -> dict[str, Any]:
    """Random players in every seat, replaced by the checkpoint's agents where ``source`` plays."""
    players = random_players(spec, seed)
    if source is not None:
        players.update(load_source(source, check_source_fits(source, spec, env_name, fill=True), backend))
    return players


def _opponent_source(option: str | None, flag: str) -> Source | None:
    if option is None or option == "random":
        return None
    return inspect_checkpoint(option, flag)


# ---------------------------------------------------------------------------------------------- train

def train(args: Any) -> int:
    """``train``: see ``python -m marl_note train --help``."""
    from marl_note.cli.zoo_command import apply_recipe, budget_text, zoo
    from marl_note.cli.zoo_run import wrap_choice
    from marl_note.trainers.budget import Budget

    if args.list_recipes:
        return zoo(args)
    with setup_errors():
        recipe = apply_recipe(args)  # without --algo: the zoo's recipe for --env fills what was not given
        check_settings(args)  # budgets, counts and the seed, recipe values included
        agent_kwargs = {**(recipe.agent_kwargs() if recipe else {}), **parse_assignments(args.agent_arg, "--agent-arg")}
        check_agent_kwargs(args.algo, agent_kwargs)
        wrappers = (*(recipe.wrappers if recipe else ()), *parse_wrappers(args.wrapper))
        choice = wrap_choice(_env(args.env, None, args.env_arg), wrappers)
        opponent_source = _opponent_source(args.opponent, "--opponent")
        out = args.out or os.path.join("runs", f"{choice.name}-{args.algo}")
        test_freq = args.test_freq or max(1, args.episodes // 10)
        save_best = SaveBest(out)
        trainer = _trainer(choice, args.num_envs, num_train_envs=args.num_envs, num_test_envs=args.num_envs,
                           batch_size=args.batch_size, update_freq=args.update_freq, test_freq=test_freq,
                           episodes_per_train=args.episodes, episodes_per_test=args.test_episodes, seed=args.seed,
                           processes=args.processes, plot_path=os.path.join(out, PLOT_FILE), save_best_fn=save_best,
                           stop_fn=None if args.stop_reward is None else _StopAt(args.stop_reward),
                           threads=_threads(args))
    try:
        with setup_errors():
            spec = trainer.spec
            plan = plan_seats(spec, args.algo, args.self_play, args.opponent, args.seat)
            check_algorithm(args.algo, spec, choice.name, plan.learners)
            check_out_dir(out, plan.checkpoint_names)
            if opponent_source is not None:
                check_source_fits(opponent_source, spec, choice.name, fill=True)
            auto = None
            if args.backend == "auto":  # numpy where bench/ measured it faster, else torch (never tf)
                from marl_note.agents.backend_choice import choose_backend

                auto = choose_backend(args.algo, options=agent_kwargs,
                                      observation_spaces=[spec.observation_space(s) for s in plan.learners])
                args.backend = auto.backend
            _check_backend(args.algo, args.backend)
            import_backend(args.backend)
            threads, _ = use_threads(_threads(args), backend=args.backend, interop=True)  # before any agent exists
            with setup_errors(f"cannot build the {args.algo} agents"):
                learners = build_learners(args.backend, args.algo, spec, plan, agent_kwargs, args.seed)
            opponents = _opponents(spec, choice.name, None, args.seed, opponent_source)
            seats = arrange_seats(plan, learners, opponents)
        # independent agents in a board game test against each other: a constant-sum metric that says nothing
        telling = not (plan.mode == "independent" and is_board_game(spec))
        if telling:
            save_best.agents = dict(learners)
        clear_earlier_run(out)  # an earlier run's checkpoints and plot in --out: none stays beside this run's
        _say(f"training {args.algo} ({args.backend}{'' if auto is None else ', auto: ' + auto.reason}) on {choice.name}"
             + (f" (zoo recipe {recipe.label})" if recipe else "")
             + f": {_describe(plan, args.opponent)}, {budget_text(args)} on {args.num_envs} envs, "
             + describe_threads(threads))
        started = time.perf_counter()
        budget = [Budget(args.env_steps, args.minutes)] if args.env_steps or args.minutes else []
        measure = [] if wrappers else _exploitability_callback(choice, seats)  # OpenSpiel games: at each test
        try:
            stats = trainer.train(seats, learning_mask=[s in plan.learners for s in trainer.possible_agents],
                                  plot=False, progress=not args.quiet, callbacks=budget + measure)
        except (KeyboardInterrupt, NonFiniteError) as exc:
            # Ctrl-C (exit 130), or a non-finite reward, observation or update (exit 1, marl_note.cli.main): the
            # weights are finite (a refused update writes none), so keep what was learned before leaving
            _save_unfinished(trainer, out, learners, {
                "env": choice.name, "env_kwargs": dict(choice.kwargs), "algo": args.algo, "backend": args.backend,
                "mode": plan.mode, "seats": plan.seat_map, "opponent": args.opponent, "seed": args.seed,
                "recipe": recipe.label if recipe else None, "wrappers": [dict(w) for w in wrappers]},
                best=save_best.saved is not None, stopped=str(exc) if isinstance(exc, NonFiniteError) else None)
            raise
        telling = telling and bool(stats["test_history"])
        _say(f"trained {stats['num_collected_episodes']} episodes, {stats['num_collected_steps']} env steps, "
             f"{stats['num_gradient_steps']} gradient steps in {time.perf_counter() - started:.0f} s"
             + (f"; best test metric {stats['best_reward']:.3f} (after {stats['best_episode']} episodes)"
                if telling else ""))
        if "exploitability" in stats:
            _say(f"exploitability of the last policies: {stats['exploitability']:.4f} (NashConv "
                 f"{stats['nash_conv']:.4f}; python -m marl_note evaluate --checkpoint {out} measures it again)")
        results = None
        if args.eval_episodes and is_board_game(spec):
            ours = {s: a for s, a in zip(trainer.possible_agents, seats) if s in plan.learners}
            results = seat_results(trainer, ours, random_players(spec, args.seed), args.eval_episodes)
            _report(results, spec, ours, "a random player")
        record = {"env": choice.name, "env_kwargs": dict(choice.kwargs), "algo": args.algo, "backend": args.backend,
                  "mode": plan.mode, "seats": plan.seat_map, "opponent": args.opponent, "seed": args.seed,
                  "episodes": stats["num_collected_episodes"], "env_steps": stats["num_collected_steps"],
                  "gradient_steps": stats["num_gradient_steps"], "best_test_metric": stats["best_reward"],
                  "best_episode": stats["best_episode"] if save_best.saved is not None else None,
                  "vs_random": results, "recipe": recipe.label if recipe else None,
                  "wrappers": [dict(w) for w in wrappers]}
        if "exploitability" in stats:
            record["exploitability"] = stats["exploitability"]
        write_run(out, record, learners, best=save_best.saved is not None)
        names = ", ".join(sorted(learners))
        best = (f"; the best test's weights (test metric {stats['best_reward']:.3f} after {save_best.saved} episodes) "
                f"in {os.path.join(out, 'best')}" if save_best.saved is not None else "; no best weights (no test "
                "metric to pick them by)")
        _say(f"saved {names}: the last weights in {os.path.join(out, 'last')}{best} (evaluate: python -m marl_note "
             f"evaluate --checkpoint {out} [--which best|last])")
        if args.plot and stats["test_history"]:
            from marl_note.trainers.plot import plot_run

            title = f"{choice.name}: {args.algo} ({args.backend}), seed {args.seed}"
            _say(f"plot: {plot_run(trainer, os.path.join(out, PLOT_FILE), title=title)}")
    finally:
        trainer.close()
    return 0


RUN_CHECKPOINT = "run_checkpoint"  # the trainer's run checkpoint under --out, written when a run ends early


def _save_unfinished(trainer: Any, out: str, learners: Mapping[str, Any], record: dict[str, Any],
                     best: bool = False, stopped: str | None = None) -> None:
    """After Ctrl-C, or a :class:`~marl_note.types.NonFiniteError` (``stopped``: its message), during training:
    save the learners (as a finished run saves them, the run record marked ``interrupted`` or with the
    ``stopped`` message) and the trainer's run checkpoint under ``out``, say where; a Ctrl-C while saving is
    ignored so that the files are whole."""
    run = trainer.run_state
    if run is None:  # interrupted before the first chunk: nothing learned yet
        return
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread else None
    try:
        ended = {"interrupted": True} if stopped is None else {"stopped": stopped}
        write_run(out, {**record, "episodes": run.episodes, "env_steps": run.env_steps, "gradient_steps": run.updates,
                        "best_test_metric": run.best if run.history else None, "vs_random": None, **ended},
                  learners, best=best)
        saved = f"saved {', '.join(sorted(learners))} under {out}"
        try:
            path = trainer.save_checkpoint(os.path.join(out, RUN_CHECKPOINT))
            saved += f" and the run checkpoint in {path} (DecentralizedTrainer.train(..., resume_from=...))"
        except Exception as exc:  # the learners are saved; say why the run checkpoint is not
            saved += f"; the run checkpoint could not be saved: {exc}"
        how = ("interrupted" if stopped is None
               else "stopped by a non-finite value (the error below; the weights from before it)")
        _say(f"{how} after {run.episodes} episodes, {run.env_steps} env steps: {saved} "
             f"(evaluate: python -m marl_note evaluate --checkpoint {out})")
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)


class _StopAt:
    """``stop_fn`` of ``--stop-reward``: stop once a test metric reaches the threshold (picklable)."""

    def __init__(self, threshold: float):
        self.threshold = float(threshold)

    def __call__(self, metric: float, episodes: int) -> bool:
        return bool(metric >= self.threshold)


def _describe(plan: Any, opponent: str | None) -> str:
    return {"self-play": "one agent in every seat (self-play)", "independent": "one agent per seat",
            "joint": "one joint learner of every seat",
            "opponent": f"a learner as {plan.learners[0]} against {opponent}"}[plan.mode]


# ---------------------------------------------------------------------------------------------- evaluate

def evaluate(args: Any) -> int:
    """``evaluate``: see ``python -m marl_note evaluate --help``."""
    from marl_note.cli.psro_command import is_psro_run, psro_evaluate

    if is_psro_run(args.checkpoint):
        return psro_evaluate(args)
    check_settings(args)
    with setup_errors():
        source = inspect_checkpoint(args.checkpoint, which=args.which)
        opponent_source = _opponent_source(args.opponent, "--opponent")
        choice = _env(args.env, source, args.env_arg)
        trainer = _trainer(choice, args.num_envs, num_train_envs=1, num_test_envs=min(args.num_envs, args.episodes),
                           episodes_per_test=args.episodes, seed=args.seed, threads=_threads(args))
    try:
        with setup_errors():
            seat_names = check_source_fits(source, trainer.spec, choice.name)
            if opponent_source is not None:
                check_source_fits(opponent_source, trainer.spec, choice.name, fill=True)
            _use_source_threads(args, source)
            ours = load_source(source, seat_names, args.backend)
            theirs = _opponents(trainer.spec, choice.name, args.backend, args.seed, opponent_source)
        _say_weights(source)
        results = seat_results(trainer, ours, theirs, args.episodes)
        _report(results, trainer.spec, ours, "a random player" if opponent_source is None else args.opponent)
        _report_team(choice, results)
        with setup_errors():
            _report_exploitability(choice, {s: ours.get(s, theirs.get(s)) for s in trainer.possible_agents}, ours)
    finally:
        trainer.close()
    return 0


def _say_weights(source: Source) -> None:
    """Which weights of a run directory play (the best test's or the last), and why when not the ones asked for."""
    if source.which is not None:
        _say(f"{source.path}: the {source.which} weights ({os.path.join(source.path, source.which)})"
             + (f"; {source.note}" if source.note else ""))


# ---------------------------------------------------------------------------------------------- play

def play(args: Any) -> int:
    """``play``: see ``python -m marl_note play --help``."""
    from marl_note.cli.play import board_for, play_game

    check_settings(args)
    with setup_errors():
        if args.env is not None:
            board_for(args.env)  # before looking at the checkpoint
        source = inspect_checkpoint(args.checkpoint, which=args.which)
        choice = _env(args.env, source, args.env_arg)
        board = board_for(choice.name)
        from marl_note.envs import adapt, make_spec

        env = adapt(choice.make())
        try:
            spec = make_spec(env)
        finally:
            env.close()
        names = list(spec.possible_agents)
        human = names[0] if args.seat is None else args.seat
        if human not in names:
            raise CLIError(f"--seat {human!r} is not a seat of {choice.name}; its seats are {', '.join(names)}")
        seats = check_source_fits(source, spec, choice.name, fill=True)
        missing = [s for s in names if s != human and s not in seats]
        if missing:
            raise CLIError(f"{args.checkpoint} has no agent that can play {missing[0]!r}")
        _use_source_threads(args, source)
        bots = load_source(source, {s: n for s, n in seats.items() if s != human}, args.backend)
    _say_weights(source)
    interactive = sys.stdin.isatty()
    tally = {"win": 0, "draw": 0, "loss": 0}
    for game in range(args.games):
        if args.games > 1:
            _say(f"game {game + 1} of {args.games}")
        seed = None if args.seed is None else args.seed + game
        result = play_game(choice.factory, board, human, bots, read=sys.stdin.readline, out=sys.stdout,
                           echo=not interactive, seed=seed)
        if result is None:
            break
        tally[result] += 1
    if args.games > 1:
        _say(f"you won {tally['win']}, drew {tally['draw']}, lost {tally['loss']}")
    return 0
