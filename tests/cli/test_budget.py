"""Budgets hold: a wall-time budget is checked inside collection, so a run stops within 5% of it even when
its chunk (update_freq) and its tests are far longer; an env-step budget ends a run whose episodes never end.

The chunks here are a million env steps and the tests a million episodes: without the checks inside
collection the runs would not end for hours. The 5% bound is checked on a clock that a loaded machine does
not move: the budget and the test read the CPU time of this thread (``time.thread_time``) in place of
``time.perf_counter``, so another job taking the cores slows the run down but cannot push it past 5%
(with the wall clock, one descheduling of 0.4 s did). The runs are in-process, in this thread (no env
subprocesses, and the trainer starts no threads), so its CPU time is all of their work: collection, the
final test and everything between. The process's CPU time was not enough: it also counts the threads
that earlier tests left in a long-lived test worker (a 4 s budget measured 4.22 s in CI, 4.13 s alone).
"""
import gc
import json
import time

import pytest
from mpe2 import simple_spread_v3

from marl_note.cli import main
from marl_note.trainers import Budget, DecentralizedTrainer

pytest.importorskip("torch")
SECONDS = 4.0  # CPU seconds: 5% is 0.2 s, a few hundred env steps
# The run's work outside the budget's cuts: start-up and wrap-up (building the collectors, the stats after the
# final test: 0.01 s alone, 0.10-0.13 s of a loaded CI worker's CPU clock, where a VM charges stolen time to the
# running thread), and handing the cut chunk's rows to the learners (about 1.5 us of CPU per env step collected
# since the last hand-over: 0.05-0.1 s for the 40-80k env steps of this budget; 2.3 us and a 4.46 s run on a
# loaded machine before rows were stacked by `types.stack_rows`). The final test may take 3% of the budget.
# bench/bench_budget.py checks the 5% on 60 s runs; these tests check that chunks, tests and updates are cut
# (without the cuts each run here takes hours).
WRAP_UP = 0.25


@pytest.fixture
def cpu_clock(monkeypatch):
    """``time.perf_counter`` reads this thread's CPU time for the test (the Budget's clock and the test's),
    with the garbage collector run first and paused meanwhile: a full collection of a long-lived test
    worker's heap (every earlier test's objects) can take a second of CPU at any moment, and it is the
    test process's, not the run's (a 4 s budget once measured 5.08 s in CI, 4.13 s alone)."""
    monkeypatch.setattr(time, "perf_counter", time.thread_time)
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def spread():
    return simple_spread_v3.parallel_env(max_cycles=25)


@pytest.mark.parametrize("env", ["CartPole-v1", spread], ids=["cartpole", "simple_spread"])
def test_a_wall_time_budget_interrupts_the_chunk_and_bounds_the_final_test(env, cpu_clock):
    from marl_note.agents.torch import DQN

    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=2, update_freq=10**6, test_freq=1,
                                   episodes_per_test=10**6, seed=0)
    try:
        name = trainer.possible_agents[0]
        dqn = DQN(trainer.observation_space(name), trainer.action_space(name), hidden_sizes=[8],
                  learning_starts=10**8, seed=0)  # acting only: the time goes to collection and the test
        budget = Budget(minutes=SECONDS / 60)
        started = time.perf_counter()
        stats = trainer.train([dqn] * len(trainer.possible_agents), learning_mask=[1] * len(trainer.possible_agents),
                              plot=False, progress=False, callbacks=[budget])
        took = time.perf_counter() - started
    finally:
        trainer.close()
    assert stats["stopped_by_budget"] == "minutes"
    assert 0 < stats["num_collected_steps"] < 10**6  # the chunk was cut where the budget ran out
    assert len(stats["test_history"]) == 1  # the final test ran, bounded
    assert SECONDS <= took < SECONDS * 1.05 + WRAP_UP, took


def test_an_env_step_budget_ends_a_run_whose_episodes_never_end(tmp_path, capsys):
    out = tmp_path / "cliff"
    # CliffWalking has no time limit: a greedy policy that walks into a wall never ends its episode
    assert main(["train", "--env", "CliffWalking-v1", "--algo", "dqn", "--env-steps", "300", "--num-envs", "2",
                 "--eval-episodes", "0", "--quiet", "--out", str(out)]) == 0
    record = json.loads((out / "marl_note_run.json").read_text())
    assert 300 <= record["env_steps"] <= 302


def test_a_wall_time_budget_ends_the_actor_pools_wait_for_rounds(no_leftovers):
    """The actors' rounds here are half a million env steps each: the learner stops waiting for them when
    the budget runs out (before this, it waited for the whole chunk, for hours)."""
    from marl_note.agents.numpy import DQN
    from marl_note.contrib.pool import ActorPool

    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=10**6, test_freq=1,
                                   episodes_per_test=10**6, seed=0, source=ActorPool(actors=2))
    dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=[8],
              learning_starts=10**8, seed=0)
    started = time.perf_counter()
    try:
        stats = trainer.train([dqn], learning_mask=[1], plot=False, progress=False,
                              callbacks=[Budget(minutes=3 / 60)])
    finally:
        trainer.close()
    took = time.perf_counter() - started
    assert stats["stopped_by_budget"] == "minutes"
    assert stats["num_collected_steps"] < 10**6 and len(stats["test_history"]) == 1
    assert took < 60, took  # the actors' start and stop aside, the run ends with its 3-second budget


@pytest.mark.timeout(60)  # the unbounded update of a regression would otherwise run for hours
@pytest.mark.parametrize("algo", ["ppo", "dqn", "mappo"])
def test_a_wall_time_budget_ends_an_update_between_gradient_steps(algo, cpu_clock):
    """Each update here would take hours (a million PPO epochs, ten million DQN gradient steps): the budget
    is asked before every gradient step, so the run still ends within 5% of it (before, the update ran on)."""
    from marl_note.agents import numpy as backend

    env = "CartPole-v1" if algo != "mappo" else spread
    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=2, update_freq=64, test_freq=10**6,
                                   episodes_per_test=2, seed=0)
    try:
        names = trainer.possible_agents
        obs, act = trainer.observation_space(names[0]), trainer.action_space(names[0])
        if algo == "ppo":
            agents = [backend.PPO(obs, act, hidden_sizes=[8], n_steps=64, n_epochs=10**6, seed=0)]
        elif algo == "dqn":
            agents = [backend.DQN(obs, act, hidden_sizes=[8], learning_starts=64, update_steps=10**7, seed=0)]
        else:
            from marl_note.agents.torch import MAPPO  # (no numpy MAPPO)

            mappo = MAPPO({n: trainer.observation_space(n) for n in names},
                                  {n: trainer.action_space(n) for n in names}, hidden_sizes=[8], n_steps=64,
                                  n_epochs=10**6, seed=0)
            agents = list(mappo.seat_agents())
        started = time.perf_counter()
        stats = trainer.train(agents, learning_mask=[1] * len(agents), plot=False, progress=False,
                              callbacks=[Budget(minutes=SECONDS / 60)])
        took = time.perf_counter() - started
    finally:
        trainer.close()
    assert stats["stopped_by_budget"] == "minutes"
    assert 0 < stats["num_gradient_steps"] < 10**6  # the update began and was cut
    assert SECONDS <= took < SECONDS * 1.05 + WRAP_UP, took
