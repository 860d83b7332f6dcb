"""Side by side with BenchMARL (not part of the test suite): simple_spread_v3, same budget, seeds and evaluation.

Runs marl_note (through its CLI, in this venv) and BenchMARL (in a venv of its own) on MPE simple_spread_v3
with 3 agents, discrete actions and 25 cycles, for the same env-step budget and the same seeds, then scores
both with the same evaluation code (:func:`evaluate_policy`, below): ``--eval-episodes`` episodes (default
100) of a raw PettingZoo parallel env, once with greedy (arg-max) actions and once with sampled ones.

Definitions, the same on both sides:

- **one env step** is one parallel step of all agents in one env. marl_note's ``--env-steps`` counts these;
  BenchMARL's "frames" are ``batch.numel()`` of the collected batch, whose batch dims are (envs, time) with
  the agents in a nested group dimension, so one frame is also one parallel step of one env. Each row
  records the steps each library reports having collected.
- **team return** (:func:`team_return`) is the mean over agents of each agent's episode return, averaged
  over the episodes. In simple_spread every agent's reward is ``0.5 * shared + 0.5 * own collisions`` (the
  default ``local_ratio=0.5``), so this is the "mean return per agent (the team reward)" of marl_note's zoo
  recipe and of BenchMARL's ``episode_reward_mean``; the sum over agents is 3 times it.
- **greedy / sampled**: marl_note's ``agent.act(obs, explore=False/True)``; BenchMARL's policy under TorchRL's
  ``ExplorationType.DETERMINISTIC`` / ``RANDOM`` (the mode or a sample of MAPPO's/IPPO's categorical policy;
  for QMIX/VDN greedy Q values or its epsilon-greedy module at its final epsilon).
- **episodes** reset with seeds ``seed * 10_000 + k`` (k = 0..episodes-1), the same on both sides.
- **wall / CPU time** of training: the whole training process, interpreter start and imports included (marl_note:
  the ``train`` command, measured around the child process with ``RUSAGE_CHILDREN``; BenchMARL: the worker
  process from its start to the end of ``Experiment.run``, ``time.process_time()``), one thread each
  (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``, marl_note's ``--threads 1``). The evaluation is not timed.

marl_note's rows evaluate the **last** weights (BenchMARL keeps no "best" policy), and both libraries run their
periodic tests during training as they do by default (marl_note's recipe tests; BenchMARL's evaluation with
10 episodes about five times a run). marl_note's ``ppo`` is the zoo recipe ``simple_spread_v3`` (one PPO
shared by the 3 agents, agent id appended) with the budget given here; the others run the zoo's recipe
``simple_spread_v3-NAME`` where this checkout has one (marl_note's own settings, as BenchMARL runs its yaml
defaults), else ``--algo NAME`` (mappo/ippo/qmix/vdn where this checkout's CLI has them). BenchMARL
runs ``mappo``, ``ippo``, ``qmix`` and ``vdn`` with its own yaml defaults (MLP models, shared parameters),
its env ``max_cycles`` set to 25 and ``prefer_continuous_actions=False``; its frames per batch is the largest
multiple of 10 envs, at most its default 6000, that divides the budget (so both sides stop at the same count).

The BenchMARL venv (``--venv``, default ``.bench-venvs/benchmarl``, git-ignored) is created when missing, with
the commands of :func:`venv_commands`::

    python3 -m venv .bench-venvs/benchmarl
    .bench-venvs/benchmarl/bin/pip install torch==2.13.0          # the CPU wheel on this machine's disk, first
    .bench-venvs/benchmarl/bin/pip freeze > .bench-venvs/benchmarl-constraints.txt   # torch pinned ...
    .bench-venvs/benchmarl/bin/pip install -c .bench-venvs/benchmarl-constraints.txt \\
        benchmarl 'pettingzoo[mpe]==1.24.3'                           # ... so it is not replaced

(TorchRL's PettingZoo loader imports ``pettingzoo.mpe``, which PettingZoo 1.27 removed: hence 1.24.3. Its video
logger needs a torchvision this torch lacks: the worker sets ``render=False`` and the CSV logger only.) The
versions it got are written to ``OUT/versions.json`` and printed.

Run:  python bench/bench_benchmarl.py [--budget 20000] [--seeds 0] [--algos mappo,ppo]
                                      [--libs marl_note,benchmarl] [--eval-episodes 100] [--out runs/bench-benchmarl]
                                      [--random] [--timeout SECONDS] [--agent-arg KEY=VALUE ...]

An algorithm runs on each library that has it (``--algos mappo,ppo``: BenchMARL's MAPPO, marl_note's PPO, and
marl_note's MAPPO where its CLI has it). The table goes to stdout and every row to ``OUT/results.csv``
(appended, so runs with other budgets or seeds add up).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

ENV = "simple_spread_v3"
N_AGENTS = 3
MAX_CYCLES = 25
LIBS = ("marl_note", "benchmarl", "random")  # random: no training, the rows of --random
#: the algorithms each library runs here (marl_note's mappo/ippo/qmix/vdn need a CLI that has them)
ALGOS = {"marl_note": ("ppo", "maddpg", "mappo", "ippo", "qmix", "vdn"),
         "benchmarl": ("mappo", "ippo", "qmix", "vdn"), "random": ()}
DEFAULT_VENV = os.path.join(".bench-venvs", "benchmarl")
TORCH_PIN = "torch==2.13.0"  # the CPU wheel on this machine's disk; a plain torch pulls a multi-GB CUDA build
PEER_PACKAGES = ("benchmarl", "pettingzoo[mpe]==1.24.3")
VERSION_PACKAGES = ("benchmarl", "torchrl", "tensordict", "torch", "pettingzoo", "numpy")
BENCHMARL_ENVS = 10  # BenchMARL's default on/off_policy_n_envs_per_worker
BENCHMARL_BATCH = 6000  # BenchMARL's default on/off_policy_collected_frames_per_batch
COLUMNS = ("env", "algo", "lib", "budget", "seed", "env_steps", "greedy", "sampled", "own_eval", "wall_s", "cpu_s",
           "steps_per_cpu_s", "eval_episodes", "command")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---------------------------------------------------------------------------------------------- options

def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options, checked: a clear error (SystemExit 2) for an unknown algorithm or library or a bad budget."""
    parser = argparse.ArgumentParser(description="marl_note and BenchMARL side by side on simple_spread_v3")
    parser.add_argument("--budget", type=int, default=20_000, help="env steps per run (default 20000)")
    parser.add_argument("--seeds", type=_int_list, default=[0], help="comma-separated seeds (default 0)")
    parser.add_argument("--algos", type=_name_list, default=["mappo", "ppo"],
                        help="comma-separated: " + ", ".join(sorted(set(ALGOS["marl_note"]) | set(ALGOS["benchmarl"])))
                        + " (default mappo,ppo); each runs on the libraries that have it")
    parser.add_argument("--libs", type=_name_list, default=["marl_note", "benchmarl"],
                        help="comma-separated: marl_note,benchmarl (default both); random: only the --random rows")
    parser.add_argument("--eval-episodes", type=int, default=100, help="episodes of each evaluation (default 100)")
    parser.add_argument("--out", default=os.path.join("runs", "bench-benchmarl"), help="run dirs and results.csv")
    parser.add_argument("--venv", default=DEFAULT_VENV, help=f"BenchMARL's venv (default {DEFAULT_VENV})")
    parser.add_argument("--random", action="store_true",
                        help="also score uniformly random actions with the same evaluation (one row per seed)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per training run (default: none)")
    parser.add_argument("--agent-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="marl_note runs only: passed to `marl_note train --agent-arg` over the recipe's own "
                             "(repeatable); the rows' algo and run dirs name it, e.g. 'mappo gamma=0.9'")
    args = parser.parse_args(argv)
    for item in args.agent_arg:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip() or " " in key:
            parser.error(f"--agent-arg: expected KEY=VALUE, got {item!r}")
    known = set(ALGOS["marl_note"]) | set(ALGOS["benchmarl"])
    for algo in args.algos:
        if algo not in known:
            parser.error(f"--algos: unknown algorithm {algo!r}; known: {', '.join(sorted(known))}")
    for lib in args.libs:
        if lib not in LIBS:
            parser.error(f"--libs: unknown library {lib!r}; known: {', '.join(LIBS)}")
    if not args.algos or not args.libs:
        parser.error("--algos and --libs need at least one name each")
    if args.budget <= 0 or args.budget % BENCHMARL_ENVS:
        parser.error(f"--budget must be a positive multiple of {BENCHMARL_ENVS} (BenchMARL's envs per batch), "
                     f"got {args.budget}")
    if args.eval_episodes <= 0:
        parser.error(f"--eval-episodes must be positive, got {args.eval_episodes}")
    if any(s < 0 for s in args.seeds):
        parser.error(f"--seeds must be non-negative, got {args.seeds}")
    return args


def runs_planned(args: argparse.Namespace,
                 available: dict[str, Sequence[str]] | None = None) -> list[tuple[str, str, int]]:
    """``(lib, algo, seed)`` of every run, in order: each algorithm on each library (of ``--libs``) that has it.

    ``available``: the algorithms each library can run here (default :data:`ALGOS`).
    """
    have = ALGOS if available is None else available
    return [(lib, algo, seed) for seed in args.seeds for algo in args.algos for lib in args.libs
            if algo in have[lib]]


def cli_algos(help_text: str) -> list[str]:
    """The ``--algo`` choices that ``marl_note train --help`` lists (``{dqn,ppo,...}``)."""
    match = re.search(r"--algo \{([^}]*)\}", help_text)
    if match is None:
        raise ValueError("marl_note train --help lists no --algo choices")
    return match.group(1).split(",")


def marl_note_algos(python: str = sys.executable) -> list[str]:
    """The algorithms of :data:`ALGOS` that this checkout's marl_note CLI offers."""
    shown = subprocess.run([python, "-m", "marl_note", "train", "--help"], capture_output=True, text=True,
                           env=_child_env(), cwd=ROOT, check=True).stdout
    offered = cli_algos(shown)
    return [a for a in ALGOS["marl_note"] if a in offered]


def benchmarl_batch(budget: int, default: int = BENCHMARL_BATCH, n_envs: int = BENCHMARL_ENVS) -> int:
    """BenchMARL's frames per batch: the largest multiple of ``n_envs`` up to ``default`` that divides ``budget``.

    BenchMARL collects whole batches (``ceil(max_n_frames / batch)`` of them), so a batch that divides the
    budget makes it stop at exactly ``budget`` env steps.
    """
    for batch in range(min(default, budget) // n_envs * n_envs, 0, -n_envs):
        if budget % batch == 0:
            return batch
    raise ValueError(f"budget {budget} has no divisor that is a multiple of {n_envs}")


# ---------------------------------------------------------------------------------------------- evaluation

def team_return(episode_returns: Any) -> float:
    """The team return: each agent's episode return, averaged over agents, then over episodes.

    ``episode_returns``: an array ``(episodes, agents)`` of per-agent episode returns.
    """
    import numpy as np

    returns = np.asarray(episode_returns, dtype=np.float64)
    if returns.ndim != 2 or returns.size == 0:
        raise ValueError(f"expected a non-empty (episodes, agents) array, got shape {returns.shape}")
    return float(returns.mean(axis=1).mean())


def episode_seed(seed: int, episode: int) -> int:
    """The reset seed of evaluation episode ``episode`` of a run with seed ``seed`` (the same on both sides)."""
    return seed * 10_000 + episode


def evaluate_policy(make_env: Callable[[], Any], act: Callable[[dict, bool], dict], episodes: int, seed: int,
                    explore: bool) -> Any:
    """Play ``episodes`` episodes of a PettingZoo parallel env: the ``(episodes, agents)`` per-agent returns.

    ``act(observations, explore)`` maps ``{agent: observation}`` to ``{agent: action}``.
    """
    import numpy as np

    env = make_env()
    try:
        agents = list(env.possible_agents)
        returns = np.zeros((episodes, len(agents)))
        for k in range(episodes):
            obs, _ = env.reset(seed=episode_seed(seed, k))
            while env.agents:
                obs, rewards, _, _, _ = env.step(act(obs, explore))
                for i, agent in enumerate(agents):
                    returns[k, i] += rewards.get(agent, 0.0)
    finally:
        env.close()
    return returns


# ---------------------------------------------------------------------------------------------- the venv

def venv_commands(venv: str, python: str = "python3") -> list[list[str]]:
    """The commands that create BenchMARL's venv: the CPU torch first, then the rest with torch pinned."""
    pip = os.path.join(venv, "bin", "pip")
    constraints = venv.rstrip(os.sep) + "-constraints.txt"
    return [[python, "-m", "venv", venv],
            [pip, "install", TORCH_PIN],
            ["sh", "-c", f"{pip} freeze | grep -i '^torch==' > {constraints}"],
            [pip, "install", "-c", constraints, *PEER_PACKAGES]]


def _venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def ensure_venv(venv: str) -> dict[str, str]:
    """Create BenchMARL's venv if it cannot import benchmarl; the versions of the packages it has."""
    python = _venv_python(venv)
    probe = [python, "-c", "import benchmarl, pettingzoo.mpe"]
    if not os.path.exists(python) or subprocess.run(probe, capture_output=True).returncode != 0:
        for command in venv_commands(venv):
            print("$", " ".join(command), flush=True)
            subprocess.run(command, check=True)
    listing = subprocess.run([python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                             check=True).stdout
    have = {p["name"].lower(): p["version"] for p in json.loads(listing)}
    return {name: have.get(name, "?") for name in VERSION_PACKAGES}


# ---------------------------------------------------------------------------------------------- running

def _child_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def zoo_recipes(recipes_dir: str = os.path.join(ROOT, "marl_note", "cli", "recipes")) -> dict[str, str]:
    """``{algo: recipe name}`` of the zoo's recipes for :data:`ENV` (``ENV.toml``, ``ENV-NAME.toml``), the env's
    default recipe first: marl_note's own settings for that algorithm on the env."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser, as the tomli package (a dependency of marl_note there)
        import tomli as tomllib

    names = sorted((f[:-5] for f in os.listdir(recipes_dir) if f == f"{ENV}.toml" or f.startswith(f"{ENV}-")),
                   key=lambda name: (name != ENV, name))
    found: dict[str, str] = {}
    for name in names:
        with open(os.path.join(recipes_dir, name + ".toml"), "rb") as f:
            found.setdefault(tomllib.load(f)["algo"], name)
    return found


def marl_note_train_command(python: str, algo: str, budget: int, seed: int, out: str,
                            recipe: str | None = None, agent_args: Sequence[str] = ()) -> list[str]:
    """The ``marl_note train`` command of one run: the zoo's ``recipe`` for the algorithm where it has one
    (``simple_spread_v3`` is shared PPO with agent ids), else ``--algo`` with the CLI's defaults;
    ``agent_args`` (``KEY=VALUE``) go to ``--agent-arg`` over them."""
    chosen = ["--recipe", recipe] if recipe is not None else ["--algo", algo]
    chosen += [word for item in agent_args for word in ("--agent-arg", item)]
    # --episodes/--minutes lifted so that --env-steps is the budget (a recipe has its own episode and minute caps)
    return [python, "-m", "marl_note", "train", "--env", ENV, *chosen, "--env-arg", f"max_cycles={MAX_CYCLES}",
            "--env-steps", str(budget), "--episodes", "100000000", "--minutes", "100000", "--seed", str(seed),
            "--threads", "1", "--eval-episodes", "0", "--quiet", "--out", out]


def _timed(command: list[str], timeout: float | None, log: str) -> tuple[float, float]:
    """Run ``command`` (output to ``log``): its wall and CPU seconds (user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=_child_env(), cwd=ROOT,
                              timeout=timeout)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed (exit {done.returncode}); see {log}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _json_tail(text: str) -> dict[str, Any]:
    """The last line of ``text`` that is a JSON object (a worker's result)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no result line in the worker's output:\n{text[-2000:]}")


def variant(algo: str, agent_args: Sequence[str] = ()) -> str:
    """A row's algorithm label: ``algo``, then the ``--agent-arg`` settings it ran with (``mappo gamma=0.9``)."""
    return " ".join([algo, *agent_args])


def marl_note_run_dir(out: str, algo: str, budget: int, seed: int, agent_args: Sequence[str] = ()) -> str:
    """Where one marl_note run writes: ``OUT/marl_note-ALGO[-KEY=VALUE...]-BUDGET-sSEED``."""
    label = "".join(f"-{item}" for item in agent_args).replace(os.sep, "_")
    return os.path.join(out, f"marl_note-{algo}{label}-{budget}-s{seed}")


def run_marl_note(algo: str, budget: int, seed: int, episodes: int, out: str, timeout: float | None,
                  agent_args: Sequence[str] = ()) -> dict:
    run_dir = marl_note_run_dir(out, algo, budget, seed, agent_args)
    command = marl_note_train_command(sys.executable, algo, budget, seed, run_dir, zoo_recipes().get(algo),
                                      agent_args)
    os.makedirs(out, exist_ok=True)
    wall, cpu = _timed(command, timeout, run_dir + ".log")
    with open(os.path.join(run_dir, "marl_note_run.json")) as f:
        steps = json.load(f)["env_steps"]
    evaluation = subprocess.run([sys.executable, __file__, "_eval-marl-note", run_dir, str(seed), str(episodes)],
                                capture_output=True, text=True, env=_child_env(), cwd=ROOT)
    if evaluation.returncode != 0:
        raise RuntimeError(f"evaluating {run_dir} failed:\n{evaluation.stderr[-2000:]}")
    scores = _json_tail(evaluation.stdout)
    return {"env_steps": steps, "greedy": scores["greedy"], "sampled": scores["sampled"], "wall_s": wall,
            "cpu_s": cpu, "command": " ".join(["python", *command[1:]])}


def run_benchmarl(algo: str, budget: int, seed: int, episodes: int, out: str, venv: str,
                  timeout: float | None) -> dict:
    run_dir = os.path.abspath(os.path.join(out, f"benchmarl-{algo}-{budget}-s{seed}"))
    os.makedirs(run_dir, exist_ok=True)
    command = [_venv_python(venv), os.path.abspath(__file__), "_benchmarl", algo, str(budget), str(seed),
               str(episodes), run_dir]
    with open(run_dir + ".log", "w") as log:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, env=_child_env(), cwd=ROOT,
                              timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"BenchMARL {algo} seed {seed} failed (exit {done.returncode}); see {run_dir}.log")
    result = _json_tail(done.stdout)
    result["command"] = f"{venv}/bin/python bench/bench_benchmarl.py _benchmarl {algo} {budget} {seed} {episodes} DIR"
    return result


def run_random(seed: int, episodes: int) -> dict:
    """Uniformly random actions (each agent's own generator, seeded) scored by :func:`evaluate_policy`."""
    import numpy as np
    from mpe2 import simple_spread_v3

    def make_env() -> Any:
        return simple_spread_v3.parallel_env(N=N_AGENTS, max_cycles=MAX_CYCLES, continuous_actions=False)

    rng = np.random.default_rng(seed)

    def act(obs: dict, explore: bool) -> dict:
        return {a: int(rng.integers(5)) for a in obs}  # simple_spread's 5 discrete actions

    scores = {mode: team_return(evaluate_policy(make_env, act, episodes, seed, explore=mode == "sampled"))
              for mode in ("greedy", "sampled")}
    return {"env_steps": 0, "wall_s": 0.0, "cpu_s": 0.0, "command": "bench_benchmarl.py --random", **scores}


# ---------------------------------------------------------------------------------------------- workers

def _marl_note_worker(run_dir: str, seed: int, episodes: int) -> None:
    """(this venv) Load a run's last weights into marl_note and score them with :func:`evaluate_policy`."""
    import numpy as np

    from marl_note.cli.commands import _env
    from marl_note.cli.runs import check_source_fits, inspect_checkpoint, load_source
    from marl_note.envs import adapt, make_spec

    source = inspect_checkpoint(run_dir, which="last")
    choice = _env(None, source, None)
    probe = adapt(choice.make())
    try:
        spec = make_spec(probe)
    finally:
        probe.close()
    seats = load_source(source, check_source_fits(source, spec, choice.name), None)

    def act(obs: dict, explore: bool) -> dict:
        return {a: np.asarray(seats[a].act(np.asarray(o)[None], explore=explore))[0] for a, o in obs.items()}

    scores = {mode: team_return(evaluate_policy(choice.make, act, episodes, seed, explore=mode == "sampled"))
              for mode in ("greedy", "sampled")}
    print(json.dumps(scores))


def _benchmarl_experiment(algo: str, budget: int, seed: int, run_dir: str) -> Any:
    """(BenchMARL's venv) The Experiment of one run: its yaml defaults, simple_spread with 3 agents, 25 cycles."""
    from benchmarl import algorithms
    from benchmarl.environments import PettingZooTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    os.makedirs(run_dir, exist_ok=True)
    config = ExperimentConfig.get_from_yaml()
    batch = benchmarl_batch(budget)
    config.max_n_frames = budget
    config.on_policy_collected_frames_per_batch = batch
    config.off_policy_collected_frames_per_batch = batch
    config.prefer_continuous_actions = False
    config.loggers = ["csv"]
    config.render = False
    config.create_json = False
    config.checkpoint_interval = 0
    config.checkpoint_at_end = False
    config.evaluation = True
    config.evaluation_interval = batch * max(1, budget // batch // 5)
    config.evaluation_episodes = 10
    config.save_folder = run_dir
    config.sampling_device = config.train_device = config.buffer_device = "cpu"
    task = PettingZooTask.SIMPLE_SPREAD.get_from_yaml()
    task.config.update({"max_cycles": MAX_CYCLES, "N": N_AGENTS, "local_ratio": 0.5})
    algorithm = {"mappo": algorithms.MappoConfig, "ippo": algorithms.IppoConfig, "qmix": algorithms.QmixConfig,
                 "vdn": algorithms.VdnConfig}[algo].get_from_yaml()
    return Experiment(task=task, algorithm_config=algorithm, model_config=MlpConfig.get_from_yaml(),
                      critic_model_config=MlpConfig.get_from_yaml(), seed=seed, config=config)


def _benchmarl_worker(algo: str, budget: int, seed: int, episodes: int, run_dir: str) -> None:
    """(BenchMARL's venv) Train one run, then score its policy with :func:`evaluate_policy` in pettingzoo.mpe."""
    start = time.perf_counter()  # the interpreter started a moment before: imports are inside the timing
    import numpy as np
    import torch
    from pettingzoo.mpe import simple_spread_v3
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    torch.set_num_threads(1)
    experiment = _benchmarl_experiment(algo, budget, seed, run_dir)
    close, experiment.close = experiment.close, lambda: None  # run() closes its envs at the end: kept for the check
    experiment.run()
    wall, cpu = time.perf_counter() - start, time.process_time()
    (group, names), = experiment.group_map.items()
    policy = experiment.policy

    def act(obs: dict, explore: bool) -> dict:
        observations = torch.as_tensor(np.stack([obs[a] for a in names]), dtype=torch.float32)
        td = TensorDict({group: TensorDict({"observation": observations}, batch_size=[len(names)])}, batch_size=[])
        kind = ExplorationType.RANDOM if explore else ExplorationType.DETERMINISTIC
        with torch.no_grad(), set_exploration_type(kind):
            actions = policy(td)[group, "action"]
        return {a: int(actions[i]) for i, a in enumerate(names)}

    def make_env() -> Any:
        return simple_spread_v3.parallel_env(N=N_AGENTS, max_cycles=MAX_CYCLES, local_ratio=0.5,
                                             continuous_actions=False)

    scores = {mode: team_return(evaluate_policy(make_env, act, episodes, seed, explore=mode == "sampled"))
              for mode in ("greedy", "sampled")}
    # a cross-check of the loop above: BenchMARL's own evaluation of the same policy, greedy, as many episodes
    experiment.config.evaluation_episodes = episodes
    experiment._evaluation_loop()
    experiment.logger.commit()
    close()
    print(json.dumps({"env_steps": int(experiment.total_frames), "wall_s": wall, "cpu_s": cpu, **scores,
                      "own_eval": _benchmarl_own_eval(run_dir)}))


def _benchmarl_own_eval(run_dir: str) -> float | None:
    """BenchMARL's own last evaluation (its CSV logger's ``eval/agent/reward/episode_reward_mean``), if logged."""
    import glob

    found = sorted(glob.glob(os.path.join(run_dir, "**", "eval_agent_reward_episode_reward_mean.csv"), recursive=True))
    if not found:
        return None
    with open(found[-1]) as f:
        lines = [line.strip().split(",") for line in f if line.strip()]
    return float(lines[-1][-1]) if lines else None


# ---------------------------------------------------------------------------------------------- the report

def row(algo: str, lib: str, budget: int, seed: int, episodes: int, result: dict) -> dict:
    """A result row (the table's and the CSV's columns)."""
    return {"env": ENV, "algo": algo, "lib": lib, "budget": budget, "seed": seed, "env_steps": result["env_steps"],
            "greedy": round(result["greedy"], 3), "sampled": round(result["sampled"], 3),
            "own_eval": "" if result.get("own_eval") is None else round(result["own_eval"], 3),
            "wall_s": round(result["wall_s"], 1), "cpu_s": round(result["cpu_s"], 1),
            "steps_per_cpu_s": round(result["env_steps"] / max(result["cpu_s"], 1e-9), 1),
            "eval_episodes": episodes, "command": result["command"]}


def format_table(rows: Sequence[dict]) -> str:
    """The rows as a fixed-width text table (all columns but the command)."""
    shown = [c for c in COLUMNS if c != "command"]
    cells = [shown] + [[str(r[c]) for c in shown] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(shown))]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(line, widths)) for line in cells)


def append_csv(path: str, rows: Sequence[dict]) -> None:
    """Append ``rows`` to the CSV at ``path`` (with a header line when the file is new)."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    load = os.getloadavg()
    print(f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    if "benchmarl" in args.libs:
        versions = ensure_venv(args.venv)
        with open(os.path.join(args.out, "versions.json"), "w") as f:
            json.dump(versions, f, indent=1)
        print("BenchMARL venv:", ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    available: dict[str, Sequence[str]] = dict(ALGOS)
    if "marl_note" in args.libs:
        available["marl_note"] = marl_note_algos()
        missing = [a for a in args.algos if a in ALGOS["marl_note"] and a not in available["marl_note"]]
        if missing:
            print(f"marl_note's CLI here has no --algo {', '.join(missing)}: those rows are left out", flush=True)
    rows, failed = [], []
    for lib, algo, seed in runs_planned(args, available):
        print(f"{lib} {algo} seed {seed}: {args.budget} env steps ...", flush=True)
        try:
            if lib == "marl_note":
                result = run_marl_note(algo, args.budget, seed, args.eval_episodes, args.out, args.timeout,
                                       args.agent_arg)
            else:
                result = run_benchmarl(algo, args.budget, seed, args.eval_episodes, args.out, args.venv,
                                       args.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as error:  # the next runs still run
            print(f"{lib} {algo} seed {seed} left out: {error}", flush=True)
            failed.append(f"{lib} {algo} seed {seed}")
            continue
        name = variant(algo, args.agent_arg) if lib == "marl_note" else algo
        rows.append(row(name, lib, args.budget, seed, args.eval_episodes, result))
        append_csv(os.path.join(args.out, "results.csv"), rows[-1:])
        print(format_table(rows[-1:]), flush=True)
    for seed in args.seeds if args.random or "random" in args.libs else []:
        rows.append(row("random", "random", 0, seed, args.eval_episodes, run_random(seed, args.eval_episodes)))
        append_csv(os.path.join(args.out, "results.csv"), rows[-1:])
    load = os.getloadavg()
    print(f"\nload after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n" + format_table(rows))
    if failed:
        print("failed or timed out (no row): " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_eval-marl-note":
        _marl_note_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_benchmarl":
        _benchmarl_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(main())
