"""The ``psro`` command (train a PSRO pool) and ``evaluate`` of the directory it writes.

``python -m marl_note psro --env openspiel/kuhn_poker --algo dqn --iterations 10 --episodes 2000``
trains one best response per iteration against the meta-strategy mixture of the pool
(:class:`~marl_note.trainers.psro.PSRO`), prints a line per iteration (the mixture's
exploitability for an OpenSpiel game) and saves the pool under ``--out`` after every iteration:
one agent checkpoint per member (``members/NAME``: manifest.json + npz) and ``psro.json`` (the
meta-strategy, payoffs, history), plus ``psro.csv``. ``evaluate --checkpoint DIR`` of such a
directory prints the members, the meta-strategy and the mixture's exploitability.

Example:
    >>> import contextlib, io
    >>> from marl_note.cli import main
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     status = main(["psro", "--env", "openspiel/kuhn_poker(players=3)", "--algo", "dqn"])
    >>> status, "not a two-player zero-sum" in err.getvalue()
    (2, True)
"""
from __future__ import annotations

import os
import time
from typing import Any

from marl_note.cli.common import CLIError, parse_assignments, setup_errors

__all__ = ["psro", "psro_evaluate", "is_psro_run", "OPENSPIEL_PREFIX"]

OPENSPIEL_PREFIX = "openspiel/"


def _say(text: str) -> None:
    print(text, flush=True)


def _env(name: str, observation: str, env_args: list[str] | None) -> tuple[Any, str | None, str]:
    """(env factory, OpenSpiel game name or None, the env's display name); refuses what PSRO cannot train."""
    kwargs = parse_assignments(env_args, "--env-arg")
    if name.startswith(OPENSPIEL_PREFIX):
        game_name = name[len(OPENSPIEL_PREFIX):]
        try:
            from marl_note.envs.openspiel import load_game, openspiel_env
        except ImportError as exc:
            raise CLIError(f"--env {name} needs OpenSpiel and Shimmy: pip install 'marl_note[openspiel]' ({exc})") \
                from None
        try:
            game = load_game(game_name, observation, **kwargs)
        except (ValueError, TypeError) as exc:
            raise CLIError(str(exc)) from None
        return (lambda: openspiel_env(game, observation=observation)), game_name, str(game)
    if observation != "observation":
        raise CLIError(f"--observation {observation} is for OpenSpiel games (--env openspiel/NAME), not {name}")
    from marl_note.cli.envs import resolve_env

    choice = resolve_env(name, kwargs)
    return choice.factory, None, choice.name


def psro(args: Any) -> int:
    """``psro``: see ``python -m marl_note psro --help``."""
    from marl_note.cli.agents import agent_class, check_agent_kwargs, check_algorithm, import_backend

    with setup_errors():
        agent_kwargs = parse_assignments(args.agent_arg, "--agent-arg")
        check_agent_kwargs(args.algo, agent_kwargs)
        factory, game, label = _env(args.env, args.observation, args.env_arg)
        out = args.out or os.path.join("runs", f"{args.env.replace('/', '-')}-psro-{args.algo}")
        if os.path.isdir(out) and os.listdir(out) and not os.path.isfile(os.path.join(out, "psro.json")):
            raise CLIError(f"--out {out} is neither empty nor an earlier PSRO run; choose another directory")
        from marl_note.trainers import DecentralizedTrainer

        with setup_errors(f"cannot build env {label}"):
            trainer = DecentralizedTrainer(factory, num_train_envs=args.num_envs, num_test_envs=1,
                                           episodes_per_train=args.episodes, episodes_per_test=1,
                                           test_freq=10 * args.episodes, batch_size=args.batch_size,
                                           update_freq=args.update_freq, seed=args.seed, threads=args.threads or 1)
        if trainer.spec.num_agents != 2:
            raise CLIError(f"PSRO needs a two-player game; {label} has {trainer.spec.num_agents} seats")
        check_algorithm(args.algo, trainer.spec, label)
        import_backend(args.backend)
        cls = agent_class(args.algo, args.backend)
        seat = trainer.spec.possible_agents[0]
        spaces = trainer.observation_space(seat), trainer.action_space(seat)

        def make_agent(iteration: int) -> Any:
            return cls(*spaces, seed=args.seed * 1000 + iteration, **agent_kwargs)

        from marl_note.trainers.psro import PSRO

        try:
            run = PSRO(trainer, make_agent, game=game, observation=args.observation, meta_solver=args.meta_solver,
                       payoff_episodes=args.payoff_episodes, seed=args.seed)
        except (ValueError, TypeError) as exc:
            raise CLIError(str(exc)) from None
        os.makedirs(out, exist_ok=True)
        run.csv_path = os.path.join(out, "psro.csv")
    _say(f"PSRO on {label}: {args.algo} ({args.backend}) best responses, {args.episodes} episodes each, "
         f"meta-solver {args.meta_solver}; saving to {out}")
    start = time.process_time()
    try:
        for _ in range(args.iterations):
            logs = run.step()
            run.save(out)
            line = f"iteration {logs['iteration']}: {logs['members']} members"
            if "exploitability" in logs:
                line += f", exploitability {logs['exploitability']:.4f} (NashConv {logs['nash_conv']:.4f})"
            meta = ", ".join(f"{n} {p:.2f}" for n, p in zip(run.names, logs["meta_strategy"]) if p >= 0.005)
            _say(f"{line}; meta-strategy: {meta}; {logs['cpu_seconds']:.1f} s CPU")
            if args.minutes is not None and time.process_time() - start >= 60 * args.minutes:
                _say(f"stopping: {args.minutes} minutes of CPU time spent")
                break
    finally:
        trainer.close()
    _say(f"saved the pool ({len(run.names)} members) and its meta-strategy to {out}")
    return 0


def is_psro_run(path: str) -> bool:
    """Whether ``path`` is a directory the ``psro`` command (or ``PSRO.save``) wrote."""
    return os.path.isfile(os.path.join(path, "psro.json"))


def psro_evaluate(args: Any) -> int:
    """``evaluate --checkpoint DIR`` of a PSRO directory: the meta-strategy and the mixture's exploitability."""
    from marl_note.trainers.psro import load_psro

    with setup_errors():
        try:
            pool = load_psro(args.checkpoint, backend=args.backend)
        except ValueError as exc:
            raise CLIError(f"--checkpoint {args.checkpoint}: {exc}") from None
    _say(f"{args.checkpoint}: a PSRO pool of {len(pool.names)} members on {pool.game or 'a game without a tree'} "
         f"(meta-solver {pool.meta_solver})")
    _say("meta-strategy: " + ", ".join(f"{n} {p:.3f}" for n, p in zip(pool.names, pool.meta_strategy)))
    if pool.game is None:
        _say("exploitability: not available (no OpenSpiel game tree)")
        return 0
    e = pool.exploitability()
    _say(f"exploitability of the mixture: {e.exploitability:.4f} (NashConv {e.nash_conv:.4f}; "
         f"observation {pool.observation})")
    return 0
