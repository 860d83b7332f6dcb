"""A zoo recipe's learner, traced: its mean update metrics over every stretch of env steps (not part of the suite).

    python bench/bench_learner_trace.py --recipe simple_spread_v3-qmix [--env-steps 160000] [--every 20000]
                                        [--seed 0] [--backend torch] [--set target_update=1000 ...]
                                        [--trainer-set batch_size=512 ...]

Trains the recipe (``marl_note/cli/recipes/NAME.toml``) for ``--env-steps`` with its periodic tests off
(first line: ``{"settings": ...}``, the recipe's agent and trainer settings as run), and after each
``--every`` env steps prints one JSON line: the env steps, the process CPU seconds so far, and the mean and
maximum over that stretch of every number the learner's updates returned (``loss``, ``q_tot_mean``, ``td_abs``,
...). ``--set KEY=VALUE`` overrides an agent setting of the recipe (values read as Python
literals, as ``--agent-arg`` reads them); ``--trainer-set KEY=VALUE`` a trainer setting (``batch_size``,
``update_freq``, ...). A run that meets a non-finite update prints it as a last line
``{"stopped": ...}``. What it is for: seeing a value estimate drift or diverge (docs/benchmarks.md, "QMIX
diverges on simple_spread").
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections import defaultdict
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marl_note.cli.common import CLIError, parse_assignments  # noqa: E402
from marl_note.cli.zoo import recipe  # noqa: E402
from marl_note.cli.zoo_run import prepare  # noqa: E402
from marl_note.types import NonFiniteError  # noqa: E402


class Trace:
    """Callback: the learner's update metrics, averaged over each ``every`` env steps and printed as JSON."""

    def __init__(self, every: int, out=sys.stdout):
        self.every, self.out = every, out
        self.values: dict[str, list[float]] = defaultdict(list)
        self.next = every
        self.start = time.process_time()

    def on_update_end(self, trainer: Any, metrics: dict[str, Any], episodes: int) -> None:
        for key, value in metrics.items():
            if key != "gradient_steps" and isinstance(value, (int, float)):
                self.values[key].append(float(value))
        steps = trainer.run_state.env_steps if trainer.run_state is not None else 0
        if steps >= self.next and self.values:
            self.next = (steps // self.every + 1) * self.every
            line: dict[str, Any] = {"env_steps": steps, "cpu_s": round(time.process_time() - self.start, 1)}
            for key, seen in sorted(self.values.items()):
                line[key] = round(sum(seen) / len(seen), 4)
                line[f"{key}_max"] = round(max(seen), 4)
            self.values.clear()
            print(json.dumps(line), file=self.out, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", required=True, help="a zoo recipe name, e.g. simple_spread_v3-qmix")
    p.add_argument("--env-steps", type=int, default=160_000)
    p.add_argument("--every", type=int, default=20_000, help="env steps per printed line")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="torch", choices=("torch", "tf", "numpy"))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an agent setting of the recipe")
    p.add_argument("--trainer-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a trainer setting of the recipe (batch_size, update_freq, num_envs, ...)")
    args = p.parse_args(argv)
    if args.env_steps <= 0 or args.every <= 0:
        p.error("--env-steps and --every must be positive")
    try:
        overrides = parse_assignments(args.set, "--set")
        trainer_overrides = parse_assignments(args.trainer_set, "--trainer-set")
    except CLIError as exc:
        p.error(str(exc))
    r = recipe(args.recipe).with_budget(env_steps=args.env_steps, minutes=None, episodes=None)
    r = dataclasses.replace(r, trainer={**r.trainer, **trainer_overrides, "test_freq": 10**9},
                            agent={**r.agent, **overrides})
    print(json.dumps({"settings": {"recipe": r.name, "seed": args.seed, "backend": args.backend,
                                   "agent": r.agent, "trainer": r.trainer}}, default=str), flush=True)
    run = prepare(r, seed=args.seed, backend=args.backend)
    trace = Trace(args.every)
    try:
        run.train(callbacks=[trace])
    except NonFiniteError as exc:
        print(json.dumps({"stopped": str(exc)}), flush=True)
    finally:
        run.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
