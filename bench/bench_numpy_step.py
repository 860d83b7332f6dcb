"""The numpy backend against PyTorch: DQN, PPO and SAC gradient steps, in one process (not part of the test suite).

Both run one thread (``OMP_NUM_THREADS=1`` for numpy's BLAS, ``torch.set_num_threads(1)``), start
from the same seed (the same weights), and their measurements are interleaved repetitions whose
medians are compared as numpy/torch ratios (the machine's load moves both alike):

- ``step``: one DQN gradient step, 64-64 MLP, batch 64, CartPole-sized inputs: the network step
  alone (``nets.train_step`` on fixed arrays: TD target, loss, backward, clipping, Adam), default
  options (double, Huber, max_grad_norm 10) and dueling;
- ``ppo``: one PPO epoch, 2048 rows in minibatches of 64 (``nets.train_step`` 32 times), 64-64,
  categorical and Gaussian policies;
- ``sac``: one SAC gradient step (twin critics, actor, temperature, targets), 256-256, batch 256,
  Pendulum-sized inputs;
- ``learn``: the agent's whole ``learn`` (replay sampling, arrays, step, target update), uniform
  and prioritized replay;
- ``zoo``: the same ``learn`` for ``bench/bench_sb3_dqn.py``'s DQN (RL Zoo's CartPole-v1 settings: 256-256,
  batch 64, Huber, no double Q, max_grad_norm 10), 20,000 transitions in the replay;
- ``against``: the ``zoo`` agent's ``learn()`` in this tree against another tree (``--against DIR``, e.g. a worktree
  of the commit before), both trees' ``marl_note`` loaded in this one process, their rounds interleaved, thread
  CPU time (``time.thread_time``); printed: each tree's median microseconds per call, the ratio this / ``DIR``,
  whether both agents' weights and optimiser state are bit for bit the same after the same calls (they start
  from the same seed and replay, so a change that keeps the arithmetic keeps them equal), and both trees'
  ``learn()`` cut into phases (replay sampling, the batch's arrays, the network step and its parts);
- ``budget``: CartPole-v1 DQN through ``DecentralizedTrainer`` for a fixed budget of env steps
  (the same env steps and, through ``replay_ratio``, the same gradient steps in both backends),
  the wall time of the training loop, tests off.

OpenBLAS's warm-up (:mod:`marl_note.agents.blas`): on the shared VM a one-thread 256 x 256 x 256 ``sgemm``
runs about 3.7x slower until one larger product has run on one thread. The script first times that product
cold, then calls ``set_blas_threads(1)`` (which the trainer and the command line call: one BLAS thread and
the warm-up) and times it again, and prints both; ``--cold`` skips the call, so the rows below it show the
cold BLAS (the figures before the warm-up existed). ``OPENBLAS_CORETYPE=Sandybridge`` in the environment
picks OpenBLAS's AVX kernels instead of the Haswell ones it detects (the header prints the variable).

Run:  python bench/bench_numpy_step.py [--only step,learn,zoo,ppo,sac,budget] [--reps 15] [--calls 200]
      [--hidden 128,128]
      python bench/bench_numpy_step.py --only against --against DIR [--rounds 30] [--calls 200]
      python bench/bench_numpy_step.py --cold         (without the BLAS warm-up)
      python bench/bench_numpy_step.py --quick        (a smoke run: small counts)
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from marl_note.agents import numpy as numpy_agents  # noqa: E402
from marl_note.agents import torch as torch_agents  # noqa: E402
from marl_note.agents.blas import set_blas_threads  # noqa: E402
from marl_note.trainers import DecentralizedTrainer  # noqa: E402
from marl_note.types import Transitions  # noqa: E402

BACKENDS = {"torch": torch_agents, "numpy": numpy_agents}
OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)  # CartPole-v1's spaces
ACT = gym.spaces.Discrete(2)
NET = dict(hidden_sizes=(64, 64))


CPU: dict[str, float] = {}  # the last interleaved() run's median process CPU seconds per call, by backend


def interleaved(fns: dict[str, Callable[[], tuple[float, float]]], reps: int) -> dict[str, float]:
    """Median over ``reps`` rounds of each ``fn()`` (wall seconds per call), the backends taking turns; the
    median process CPU seconds per call go to :data:`CPU`."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            times[name].append(fn())
    CPU.clear()
    CPU.update({name: statistics.median(t[1] for t in ts) for name, ts in times.items()})
    return {name: statistics.median(t[0] for t in ts) for name, ts in times.items()}


def per_call(fn: Callable[[], object], calls: int) -> Callable[[], tuple[float, float]]:
    def timed() -> tuple[float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls, (time.process_time() - cpu) / calls

    return timed


def report(title: str, medians: dict[str, float], unit: float = 1e3, unit_name: str = "ms") -> float:
    ratio = medians["numpy"] / medians["torch"]
    cpu = (f"; process CPU torch {CPU['torch'] * unit:.3f}, numpy {CPU['numpy'] * unit:.3f} {unit_name}, "
           f"{CPU['numpy'] / CPU['torch']:.2f}x") if CPU else ""
    print(f"{title}: torch {medians['torch'] * unit:.3f} {unit_name}, numpy {medians['numpy'] * unit:.3f} "
          f"{unit_name}, numpy/torch {ratio:.2f}x{cpu}", flush=True)
    CPU.clear()
    return ratio


def cartpole_batch(n: int, rng: np.random.Generator, cls: Any = Transitions) -> Transitions:
    return cls(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 2, n),
                       rew=np.ones(n, np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.05, truncated=np.zeros(n, bool))


def bench_step(reps: int, calls: int) -> None:
    for label, options in (("default", {}), ("dueling", dict(dueling=True))):
        arrays, fns = {}, {}
        for name, mod in BACKENDS.items():
            agent = mod.DQN(OBS, ACT, seed=0, **NET, **options)
            arrays[name] = agent._arrays(cartpole_batch(64, np.random.default_rng(1)))
            fns[name] = per_call(lambda a=agent, b=arrays[name]: a.nets.train_step(b, "DQN", 1), calls)
        sizes = "-".join(map(str, NET["hidden_sizes"]))
        report(f"DQN network step, {sizes}, batch 64, {label}", interleaved(fns, reps))


def bench_ppo(reps: int) -> None:
    """One PPO epoch over 2048 rows in minibatches of 64 (32 network steps), 64-64, CartPole-sized inputs."""
    rng = np.random.default_rng(3)
    rows = 2048
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    mask = np.ones((rows, 2), bool)
    for label, space in (("categorical", ACT), ("gaussian", gym.spaces.Box(-1.0, 1.0, (2,), np.float32))):
        act = rng.integers(0, 2, rows) if label == "categorical" else rng.normal(size=(rows, 2)).astype(np.float32)
        fns = {}
        for name, mod in BACKENDS.items():
            agent = mod.PPO(OBS, space, seed=0, **NET)
            old_logp = agent.nets.evaluate(x, act, mask)[0]
            adv, ret = rng.normal(size=rows).astype(np.float32), rng.normal(size=rows).astype(np.float32)
            w = np.ones(64, np.float32)

            def epoch(nets=agent.nets, old_logp=old_logp, act=act, adv=adv, ret=ret, w=w) -> None:
                for start in range(0, rows, 64):
                    s = slice(start, start + 64)
                    nets.train_step(x[s], act[s], mask[s], old_logp[s], adv[s], ret[s], w, who="PPO", update=1)

            fns[name] = per_call(epoch, 1)
        sizes = "-".join(map(str, NET["hidden_sizes"]))
        report(f"PPO epoch, {sizes}, 2048 rows, minibatch 64, {label}", interleaved(fns, reps))


def bench_sac(reps: int, calls: int) -> None:
    """One SAC gradient step (critics, actor, temperature, targets), 256-256, batch 256, continuous actions."""
    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    obs = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)  # Pendulum-v1's spaces
    rng = np.random.default_rng(4)
    batch = Transitions(obs=rng.normal(size=(256, 3)).astype(np.float32), act=rng.uniform(-1, 1, (256, 1)),
                        rew=rng.normal(size=256).astype(np.float32),
                        next_obs=rng.normal(size=(256, 3)).astype(np.float32), terminated=np.zeros(256, bool),
                        truncated=np.zeros(256, bool))
    fns = {}
    for name, mod in BACKENDS.items():
        agent = mod.SAC(obs, box, seed=0, hidden_sizes=(256, 256))
        arrays = agent.train_inputs(batch)
        fns[name] = per_call(lambda a=agent, b=arrays: a.nets.train_step(b, "SAC", 1), calls)
    report("SAC step, 256-256, batch 256, continuous", interleaved(fns, reps))


def bench_learn(reps: int, calls: int) -> None:
    for label, options in (("uniform", {}), ("prioritized", dict(prioritized=True))):
        fns = {}
        for name, mod in BACKENDS.items():
            agent = mod.DQN(OBS, ACT, seed=0, buffer_size=10_000, **NET, **options)
            rng = np.random.default_rng(2)
            for _ in range(10):
                agent.observe(cartpole_batch(500, rng))
            fns[name] = per_call(lambda a=agent: a.learn(a.replay.sample(64)), calls)
        report(f"DQN learn(), 64-64, batch 64, {label} replay", interleaved(fns, reps))


ZOO = dict(hidden_sizes=(256, 256), activation="relu", lr=2.3e-3, gamma=0.99, buffer_size=100_000,
           learning_starts=1000, update_steps=128, target_update_agent_steps=10, double=False, criterion="huber",
           max_grad_norm=10.0)


def zoo_agent(mod: Any, cls: Any = Transitions) -> Any:
    """The DQN of ``bench/bench_sb3_dqn.py`` from backend module ``mod``, seed 0, 20,000 transitions stored
    (``cls``: the ``Transitions`` class of ``mod``'s tree)."""
    agent = mod.DQN(OBS, ACT, seed=0, **ZOO)
    rng = np.random.default_rng(2)
    for _ in range(40):
        agent.observe(cartpole_batch(500, rng, cls))
    return agent


def bench_zoo(reps: int, calls: int) -> None:
    """``learn()`` of the DQN of ``bench/bench_sb3_dqn.py`` (RL Zoo's CartPole-v1 settings: 256-256 ReLU, batch 64,
    Huber, no double Q, max_grad_norm 10, lr 2.3e-3): replay sampling, arrays, the step, the target bookkeeping."""
    fns = {}
    for name, mod in BACKENDS.items():
        agent = zoo_agent(mod)
        fns[name] = per_call(lambda a=agent: a.learn(a.replay.sample(64)), calls)
    report("DQN learn(), RL Zoo CartPole-v1 (256-256, batch 64, Huber, no double)", interleaved(fns, reps))


def load_tree(tree: Path) -> dict[str, Any]:
    """Import ``tree``'s ``marl_note`` (its numpy backend) afresh; returns its modules (the ``sys.modules`` entries
    to put back before running its code, for imports made at call time)."""
    for name in [n for n in sys.modules if n == "marl_note" or n.startswith("marl_note.")]:
        del sys.modules[name]
    sys.path.insert(0, str(tree))
    try:
        import marl_note.agents.numpy  # noqa: F401
        import marl_note.types  # noqa: F401
    finally:
        sys.path.remove(str(tree))
    mods = {n: m for n, m in sys.modules.items() if n == "marl_note" or n.startswith("marl_note.")}
    assert str(Path(mods["marl_note"].__file__).resolve()).startswith(str(tree.resolve())), mods["marl_note"].__file__
    return mods


def thread_timed(fn: Callable[[], object], calls: int) -> float:
    """Thread CPU seconds per call of ``calls`` calls of ``fn``."""
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls


def learn_phases(agent: Any, calls: int) -> dict[str, float]:
    """Thread CPU microseconds per call of each phase of ``agent.learn`` (the numpy DQN at RL Zoo's settings),
    each phase timed alone over ``calls`` calls on one sampled batch (the step's parts on that batch's arrays)."""
    batch = agent.replay.sample(64)
    arrays = agent._arrays(batch)
    nets = agent.nets
    obs, next_obs = arrays["obs"], arrays["next_obs"]
    forward = nets.q_net.forward(obs)
    target = nets.td_target(arrays)
    grads = nets._loss(arrays, target, forward, nets.grads("optimizer"))[3]  # one step's gradients, in place
    fns: dict[str, Callable[[], object]] = {
        "learn()": lambda: agent.learn(agent.replay.sample(64)),
        "replay sample": lambda: agent.replay.sample(64),
        "batch arrays (_arrays)": lambda: agent._arrays(batch),
        "network step (train_step)": lambda: nets.train_step(arrays, "DQN", 1),
        "  online forward": lambda: nets.q_net.forward(obs),
        "  target network pass": lambda: nets.target_net(next_obs),
        "  TD target (pass + argmax)": lambda: nets.td_target(arrays),
        "  loss + backward": lambda: nets._loss(arrays, target, forward, nets.grads("optimizer")),
        "  clipping + Adam (step)": lambda: nets.step("optimizer", 0.0, grads, nets.config.max_grad_norm, "DQN", 1),
    }
    return {name: 1e6 * thread_timed(fn, calls) for name, fn in fns.items()}


def bench_against(tree: Path, rounds: int, calls: int) -> None:
    """The zoo agent's ``learn()`` in ``tree`` and in this repository, in this process, interleaved rounds."""
    here = Path(__file__).resolve().parents[1]
    trees = {"base": tree.resolve(), "this": here}
    agents, mods = {}, {}
    for name, path in trees.items():
        mods[name] = load_tree(path)
        agents[name] = zoo_agent(mods[name]["marl_note.agents.numpy"], mods[name]["marl_note.types"].Transitions)
    times: dict[str, list[float]] = {name: [] for name in trees}
    for k in range(rounds + 1):
        for name in (("base", "this") if k % 2 == 0 else ("this", "base")):
            sys.modules.update(mods[name])
            agent = agents[name]
            t = thread_timed(lambda a=agent: a.learn(a.replay.sample(64)), calls)
            if k:  # round 0 warms both up
                times[name].append(t)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    states = {name: a.state_dict() for name, a in agents.items()}
    same = states["base"].keys() == states["this"].keys() and all(
        np.array_equal(np.asarray(states["base"][k]), np.asarray(states["this"][k])) for k in states["base"])
    print(f"DQN learn(), RL Zoo CartPole-v1 (256-256, batch 64), {rounds} rounds x {calls} calls, thread CPU: "
          f"base ({trees['base']}) {med['base'] * 1e6:.1f} us, this {med['this'] * 1e6:.1f} us per call, "
          f"this/base {med['this'] / med['base']:.3f}x; the same weights and optimiser state after "
          f"{(rounds + 1) * calls} calls each: {same}", flush=True)
    phases = {}
    for name in ("base", "this"):  # each phase timed alone (warm caches: the parts add up to less than learn())
        sys.modules.update(mods[name])
        phases[name] = learn_phases(agents[name], max(100, calls))
    print(f"  {'phase, us per call':28s} {'base':>8s} {'this':>8s}", flush=True)
    for phase in phases["this"]:
        print(f"  {phase:28s} {phases['base'][phase]:8.1f} {phases['this'][phase]:8.1f}", flush=True)


def cartpole_run(backend: str, env_steps: int, seed: int = 0) -> dict:
    """DQN (64-64, otherwise the defaults) on CartPole-v1, 16 envs, update_freq 100, batch 64, until
    ``env_steps`` env steps, tests off: the training loop's wall time and its counts."""
    box: dict = {}

    def train_fn(episodes: int, steps: int) -> None:
        if steps == 0 and "start" not in box:
            box["start"] = time.perf_counter()
        if steps >= env_steps and "end" not in box:
            box["end"] = time.perf_counter()
            box["env_steps"], box["gradient_steps"] = steps, box["agent"].updates
            box["trainer"].stop_training = True

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=16, num_test_envs=1, update_freq=100,
                                   test_freq=10**9, episodes_per_train=10**6, episodes_per_test=1, seed=seed,
                                   train_fn=train_fn)
    agent = BACKENDS[backend].DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=seed,
                                  **NET)
    box.update(trainer=trainer, agent=agent)
    trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    trainer.close()
    return {"wall_s": box["end"] - box["start"], "env_steps": box["env_steps"], "gradient_steps": box["gradient_steps"]}


def bench_budget(env_steps: int, reps: int) -> None:
    runs: dict[str, list[dict]] = {name: [] for name in BACKENDS}
    for _ in range(reps):
        for name in runs:
            runs[name].append(cartpole_run(name, env_steps))
    counts = {name: (rs[0]["env_steps"], rs[0]["gradient_steps"]) for name, rs in runs.items()}
    print(f"CartPole-v1 DQN 64-64, fixed budget (env steps, gradient steps): {counts}, {reps} run(s) each", flush=True)
    report("  training loop wall time", {name: statistics.median(r["wall_s"] for r in rs) for name, rs in runs.items()},
           unit=1.0, unit_name="s")


def sgemm_ms(calls: int = 100) -> float:
    """Process CPU milliseconds of one float32 256 x 256 x 256 product (the SAC networks' size)."""
    a, b = (np.random.default_rng(i).random((256, 256), dtype=np.float32) for i in range(2))
    start = time.process_time()
    for _ in range(calls):
        a @ b
    return (time.process_time() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="step,learn,zoo,ppo,sac",
                        help="comma-separated: step, learn, zoo, ppo, sac, budget, against")
    parser.add_argument("--against", type=Path, default=None,
                        help="with --only against: the tree to compare with (a worktree of another commit)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of --only against")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--env-steps", type=int, default=10_000)
    parser.add_argument("--budget-reps", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--cold", action="store_true", help="skip set_blas_threads(1) and its BLAS warm-up")
    parser.add_argument("--hidden", default="64,64",
                        help="hidden sizes of the DQN, PPO and budget networks (default 64,64)")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.calls, args.env_steps, args.budget_reps, args.rounds = 3, 20, 1500, 1, 3
    NET["hidden_sizes"] = tuple(int(h) for h in args.hidden.split(","))
    torch.set_num_threads(1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{platform.machine()}, {os.cpu_count()} cores, load {load:.1f}; torch {torch.__version__} "
          f"({torch.get_num_threads()} thread), numpy {np.__version__}, "
          f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(auto)')}")
    cold = sgemm_ms()  # the process's first products: before any warm-up
    if not args.cold:
        set_blas_threads(1)
        warm = sgemm_ms()
        print(f"float32 256x256x256 product, one thread: cold {cold:.2f} ms, after set_blas_threads(1) "
              f"{warm:.2f} ms of CPU, warm/cold {warm / cold:.2f}x")
    else:
        print(f"float32 256x256x256 product, one thread, cold (--cold: no warm-up): {cold:.2f} ms of CPU")
    only = set(args.only.split(","))
    if "step" in only:
        bench_step(args.reps, args.calls)
    if "learn" in only:
        bench_learn(args.reps, args.calls)
    if "zoo" in only:
        bench_zoo(args.reps, args.calls)
    if "ppo" in only:
        bench_ppo(args.reps)
    if "sac" in only:
        bench_sac(args.reps, max(1, args.calls // 10))
    if "budget" in only:
        bench_budget(args.env_steps, args.budget_reps)
    if "against" in only:
        if args.against is None:
            raise SystemExit("--only against needs --against DIR (a tree to compare with)")
        bench_against(args.against, args.rounds, args.calls)
    if hasattr(os, "getloadavg"):
        print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
