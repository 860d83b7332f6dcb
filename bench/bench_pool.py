"""Pool trainer (actors=N) vs the synchronous trainer: wall-clock to a target score, env steps/s.

    python bench/bench_pool.py [--target-cartpole 195] [--target-ttt 0.0] [--max-episodes 3000]
                               [--actors 2] [--seeds 0] [--only cartpole,ttt,collect] [--tiny]
                               [--no-ray] [--ray-address ADDR] [--backend torch]

(a) CartPole-v1 DQN and (b) tic-tac-toe self-play DQN with an opponent pool (``OpponentPool``: half
the games against itself, the rest against its frozen snapshots, a new one every 200 games, drawn by
prioritized fictitious self-play; in pool mode the actors run this matchmaker on the published
snapshots): each is trained with the same seed, agent and budget by the synchronous trainer and by
the pool trainer (``actors``), and stopped when its periodic test reaches the target (``stop_fn``;
tic-tac-toe: the mean return of greedy games against ``--ttt-opponent`` in each seat, win 1, draw 0,
loss -1: by default the win-or-block player, so the target asks for play that does not lose to it,
not only for beating a random player; 100 games per seat every 200 training games, since a handful
of games cannot tell a learner that stopped losing from a lucky one). Reported are the wall-clock
seconds, episodes and the last test metric of each, and the speed-up (also per env step); for tic-
tac-toe also the final quality of both learners: the library's ``strength`` (win + draw/2 over 100
greedy games per seat) against a random and a win-or-block player (which wins when it can and blocks
an immediate loss); the wall time each run spent collecting, updating and testing (``time_split``),
and for the synchronous run the most a pool could gain at the same replay ratio: its whole time over
its update and test time. Then the env steps per second of the pool with 1 and with 2 actors on
CartPole (a DQN learner that does not learn: ``learning_starts`` beyond the run, so the numbers
measure collection through the pool), for actor processes and for Ray actors (``pool={"backend":
"ray"}``; Ray is started once, locally or at ``--ray-address``, before those rows, so its start-up
is not in them; ``--no-ray`` skips them).

Each seed of ``--seeds`` runs both trainers; the last line of a case is the median speed-up over the
seeds. ``--backend numpy`` builds the DQNs from ``marl_note.agents.numpy`` (the learner's steps and the
actors' acting without a framework; the script itself then imports none). The learner runs with the
library's default threads (in pool mode ``learner_threads="auto"`` leaves the actors their cores).
``--tiny`` runs every part for a few seconds (a smoke test of the script, not a measurement).
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import time
import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning)
from pettingzoo.classic import tictactoe_v3  # noqa: E402

from marl_note.agents import RandomAgent  # noqa: E402
from marl_note.contrib.board_games import WinOrBlockPlayer  # noqa: E402
from marl_note.trainers import DecentralizedTrainer, OpponentPool, strength  # noqa: E402

BACKEND = {"name": "torch"}  # --backend: the module the DQNs come from


def DQN(*args, **kwargs):
    """The DQN of ``--backend`` (imported on first use, so a numpy run never imports torch)."""
    return importlib.import_module(f"marl_note.agents.{BACKEND['name']}").DQN(*args, **kwargs)


def run(env, seats, target, episodes, actors, seed, pool=None, quality=None, **settings):
    """Train to ``target``; returns (seconds, episodes, last test metric, env steps, quality).

    ``seats(trainer) -> (agents, train keyword arguments)``; ``quality(trainer, agent)``, measured
    after the clock stops, is what the run's final quality is reported as (None: not measured)."""
    trainer = DecentralizedTrainer(env, episodes_per_train=episodes, seed=seed, actors=actors, pool=pool,
                                   stop_fn=lambda metric, _: metric >= target, **settings)
    agents, extra = seats(trainer)
    t0 = time.perf_counter()
    try:
        stats = trainer.train(agents, learning_mask=[1] * len(agents), plot=False, progress=False, **extra)
        seconds = time.perf_counter() - t0
        measured = None if quality is None else quality(trainer, agents[0])
    finally:
        trainer.close()
    run.split = stats["time_split"]  # the last run's wall seconds per phase (collect / update / test)
    return seconds, stats["num_collected_episodes"], trainer.history[-1][1], stats["num_collected_steps"], measured


def cartpole_seats(hidden, learning_starts):
    def seats(trainer):
        return [DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=hidden,
                    learning_starts=learning_starts, target_update=200, seed=trainer.seed)], {}
    return seats


def ttt_seats(snapshot_every, opponent):
    """Self-play DQN with an opponent pool; the periodic tests play ``opponent`` in each seat."""
    def seats(trainer):
        agent = DQN(trainer.observation_space("player_1"), trainer.action_space("player_1"), hidden_sizes=(64, 64),
                    learning_starts=200, target_update=200, seed=trainer.seed)
        league = OpponentPool(agent, trainer.spec, snapshot_every=snapshot_every, sampling="prioritized",
                              self_play_fraction=0.5, eval_episodes=10, seed=trainer.seed)
        baseline = WinOrBlockPlayer("tictactoe", seed=103) if opponent == "win-or-block" else "auto"
        return [agent, agent], {"matchmaker": league, "callbacks": [league], "baseline": baseline}
    return seats


def ttt_quality(games):
    def quality(trainer, agent):
        space = trainer.action_space("player_1")
        table = strength(trainer, agent, {"random": RandomAgent(space, seed=101),
                                          "win-or-block": WinOrBlockPlayer("tictactoe", seed=102)}, games)
        return "  ".join(f"{name} {seat[-1]}: {row['score']:.2f}" for name, seats in table.items()
                         for seat, row in seats.items())
    return quality


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target-cartpole", type=float, default=195.0)
    parser.add_argument("--target-ttt", type=float, default=0.0)
    parser.add_argument("--ttt-opponent", default="win-or-block", choices=["win-or-block", "random"],
                        help="the periodic tests' opponent in the tic-tac-toe case")
    parser.add_argument("--max-episodes", type=int, default=3000)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, each run by both trainers")
    parser.add_argument("--only", default="cartpole,ttt,collect", help="comma-separated parts to run")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray actor rows")
    parser.add_argument("--ray-address", default=None, help="a Ray cluster to join (default: a local Ray)")
    parser.add_argument("--backend", default="torch", choices=["torch", "numpy"], help="the DQNs' backend")
    args = parser.parse_args()
    BACKEND["name"] = args.backend
    print(f"DQN backend: {args.backend}", flush=True)
    episodes = 20 if args.tiny else args.max_episodes
    common = dict(num_train_envs=4, num_test_envs=4, update_freq=64, test_freq=10 if args.tiny else 50,
                  episodes_per_test=4 if args.tiny else 10)
    seeds = [int(s) for s in args.seeds.split(",")]
    only = set(args.only.split(","))
    cases = [("CartPole-v1 DQN", "CartPole-v1", cartpole_seats((64, 64), 500), args.target_cartpole, None, "cartpole"),
             ("tic-tac-toe self-play DQN", tictactoe_v3.env, ttt_seats(10 if args.tiny else 200, args.ttt_opponent),
              args.target_ttt, ttt_quality(4 if args.tiny else 100), "ttt")]
    for name, env, seats, target, quality, part in cases:
        if part not in only:
            continue
        settings = common if part != "ttt" or args.tiny else {**common, "test_freq": 200, "episodes_per_test": 200}
        results = [one_case(name, env, seats, target, quality, episodes, args.actors, seed, settings)
                   for seed in seeds]
        speedups = [x for x in results if x == x] or [float("nan")]  # seeds whose runs both reached the target
        listed = ", ".join(f"{x:.2f}x" for x in results)
        print(f"{name:28s} speed-ups to the target over seeds {seeds}: {listed}; median of the seeds that reached "
              f"it {statistics.median(speedups):.2f}x", flush=True)
    if "collect" in only:
        collection(args, common)


def one_case(name, env, seats, target, quality, episodes, actors, seed, common) -> float:
    """Both trainers on one seed; prints their rows and returns the pool's speed-up to the target."""
    name = f"{name} (seed {seed})"
    seconds, per_step, reached = {}, {}, True
    for label, n_actors in (("synchronous", None), (f"pool, {actors} actors", actors)):
        s, n, metric, steps, measured = run(env, seats, target, episodes, n_actors, seed, quality=quality, **common)
        seconds[n_actors], per_step[n_actors] = s, s / max(1, steps)
        reached = reached and metric >= target
        print(f"{name:28s} {label:18s} {s:8.1f} s  {n:6d} episodes  {steps:8d} env steps  "
              f"last test {metric:8.3f}  (target {target})", flush=True)
        if measured is not None:
            print(f"{name:28s} {label:18s} final strength (win + draw/2 per seat): {measured}", flush=True)
        split = run.split
        print(f"{name:28s} {label:18s} time split: collect {split['collect_s']:.1f} s, update "
              f"{split['update_s']:.1f} s, test {split['test_s']:.1f} s", flush=True)
        if n_actors is None:  # the learner keeps updating and testing: moving collection out saves at most this
            ceiling = sum(split.values()) / max(1e-9, split["update_s"] + split["test_s"])
            print(f"{name:28s} {label:18s} ceiling of a pool at this replay ratio (all collection "
                  f"overlapped): {ceiling:.2f}x", flush=True)
    if not reached:  # a run that stopped at its episode budget says nothing about the time to the target
        print(f"{name:28s} speed-up to the target: not measured (a run ended its budget below the target)")
        return float("nan")
    speedup = seconds[None] / seconds[actors]
    print(f"{name:28s} speed-up to the target: {speedup:.2f}x (per env step: "
          f"{per_step[None] / per_step[actors]:.2f}x)", flush=True)
    return speedup


def collection(args, common) -> None:
    """Env steps per second through the pool with 1 and 2 actors (processes, then Ray)."""
    steps_budget = 30 if args.tiny else 400
    backends = [("processes", None)] + ([] if args.no_ray else [("Ray", {"backend": "ray"})])
    for backend, pool in backends:
        if pool is not None:
            import ray

            from marl_note.contrib.pool.ray_backend import start_ray
            start_ray(args.ray_address)
        try:
            for actors in (1, 2):
                s, n, _, steps, _ = run("CartPole-v1", cartpole_seats((64, 64), 10**9), float("inf"), steps_budget,
                                     actors, 0, pool, **{**common, "test_freq": 10**6, "episodes_per_test": 1})
                print(f"CartPole collection through the pool ({backend}), {actors} actor(s): {steps / s:9.0f} env "
                      f"steps/s ({steps} steps, {n} episodes, {s:.1f} s incl. actor start-up)", flush=True)
        finally:
            if pool is not None:
                ray.shutdown()


if __name__ == "__main__":
    main()
