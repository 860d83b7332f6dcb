"""PyTorch agents on two local ranks (gloo, 127.0.0.1): equal updates, the trainer in lockstep,
rank 0's checkpoint, a killed rank. Each test starts its ranks with ``launch`` (spawned processes)."""
import importlib.util
import multiprocessing
import os
import pickle
import signal
import time

import gymnasium as gym
import numpy as np
import pytest

from marl_note.contrib.distributed.ranks import RankFailedError, launch
from marl_note.distributed import DistributedContext

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)

OBS, N_ACT = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(3)
GLOBAL_BATCH = 8


def _global_batch():
    rng = np.random.default_rng(7)
    n = GLOBAL_BATCH
    dqn = {"obs": rng.normal(size=(n, 4)).astype(np.float32), "act": rng.integers(0, 3, n),
           "next_obs": rng.normal(size=(n, 4)).astype(np.float32), "rew": rng.normal(size=n).astype(np.float32),
           "discount": np.full(n, 0.99, np.float32), "alive": (rng.random(n) > 0.2).astype(np.float32),
           "legal": np.ones((n, 3), bool), "weights": rng.uniform(0.5, 1.0, n).astype(np.float32)}
    ppo = (rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n), np.ones((n, 3), bool),
           np.log(np.full(n, 1 / 3, np.float32)), rng.normal(size=n).astype(np.float32),
           rng.normal(size=n).astype(np.float32), np.ones(n, np.float32))
    return dqn, ppo


def _one_update(ctx: DistributedContext, seed: int) -> dict[str, np.ndarray]:
    """DQN's and PPO's weights after one train step on this rank's share of the global batch."""
    from marl_note.agents.torch import DQN, PPO

    dqn = DQN(OBS, N_ACT, hidden_sizes=(16,), max_grad_norm=0.5, seed=seed)
    ppo = PPO(OBS, N_ACT, hidden_sizes=(16,), max_grad_norm=0.5, seed=seed)
    for agent in (dqn, ppo):
        ctx.prepare(agent)
    dqn_batch, ppo_batch = _global_batch()
    share = slice(ctx.rank * GLOBAL_BATCH // ctx.world_size, (ctx.rank + 1) * GLOBAL_BATCH // ctx.world_size)
    dqn.nets.train_step({k: v[share] for k, v in dqn_batch.items()}, who="DQN", update=1)
    ppo.nets.train_step(*(a[share] for a in ppo_batch), who="PPO", update=1)
    state = {f"dqn.{k}": v for k, v in dqn.nets.state_dict().items() if k.startswith("q_net")}
    state.update({f"ppo.{k}": v for k, v in ppo.nets.state_dict().items() if k.startswith("net")})
    return state


def _every_algorithm(ctx: DistributedContext) -> dict[str, dict[str, np.ndarray]]:
    """SAC, DDPG, MADDPG and a user ``RL`` subclass after two updates on this rank's own random data."""
    import marl_note.agents.torch as backend
    from marl_note.types import Transitions
    from tests.agents.maddpg_helpers import joint_batch
    from tests.compat.rl_helpers import user_rl

    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    obs = {"a": OBS, "b": gym.spaces.Discrete(5)}
    act = {"a": gym.spaces.Discrete(3, start=1), "b": box}
    agents = {"SAC": backend.SAC(OBS, box, hidden_sizes=(8,), learning_starts=8, seed=ctx.rank),
              "DDPG": backend.DDPG(OBS, box, hidden_sizes=(8,), learning_starts=8, seed=ctx.rank),
              "MADDPG": backend.MADDPG(obs, act, hidden_sizes=(8,), learning_starts=8, seed=ctx.rank),
              "RL": user_rl(backend, OBS, N_ACT, learning_starts=8)}
    with torch.no_grad():
        agents["RL"].q.weight.add_(float(ctx.rank))  # rank 0's weights must win
    rng = np.random.default_rng(100 + ctx.rank)  # each rank's own data: only averaging keeps them equal
    out = {}
    for name, agent in agents.items():
        ctx.prepare(agent)
        if name == "MADDPG":
            agent.observe_joint(joint_batch(16, rng, obs, act))
        else:
            a = rng.integers(0, 3, 16) if name == "RL" else rng.uniform(-1, 1, (16, 2)).astype(np.float32)
            agent.observe(Transitions(obs=rng.normal(size=(16, 4)).astype(np.float32), act=a, rew=rng.normal(size=16),
                                      next_obs=rng.normal(size=(16, 4)).astype(np.float32),
                                      terminated=rng.random(16) < 0.2, truncated=np.zeros(16, bool)))
        for _ in range(2):
            assert agent.update(batch_size=4)["gradient_steps"] >= 1
        out[name] = {k: v for k, v in agent.state_dict().items()
                     if isinstance(v, np.ndarray) and v.dtype.kind == "f" and "rng" not in k}
    return out


def _transitions(n: int, rng: np.random.Generator):
    from marl_note.types import Transitions

    return Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=rng.integers(0, 3, n),
                       rew=rng.normal(size=n), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool))


def _set_then_update(ctx: DistributedContext) -> dict:
    """A DQN rebuilt by ``set()`` after ``prepare``: one step on this rank's share of a global batch
    (the noise measurement it gives), then two updates on this rank's own data (equal weights on
    every rank only if the rebuilt networks still average the gradients)."""
    from marl_note.compat.torch import DQN

    agent = DQN(OBS, N_ACT, hidden_sizes=(16,), learning_starts=8, seed=ctx.rank)
    ctx.prepare(agent)
    agent.set(update_batches=50, num_updates=1)  # target_update, update_steps: a rebuild of the agent
    share = slice(ctx.rank * GLOBAL_BATCH // ctx.world_size, (ctx.rank + 1) * GLOBAL_BATCH // ctx.world_size)
    agent.learn(_transitions(GLOBAL_BATCH, np.random.default_rng(7))[share])
    noise = [agent.noise_scale.count, agent.noise_scale.g_sq, agent.noise_scale.trace_sigma]
    agent.observe(_transitions(16, np.random.default_rng(200 + ctx.rank)))
    for _ in range(2):
        assert agent.update(batch_size=4)["gradient_steps"] == 1
    return {"target_update": agent.config["target_update"], "noise": noise,
            "weights": {k: v for k, v in agent.state_dict().items() if k.startswith("q_net")}}


def _trainer(ctx: DistributedContext, episodes: int, batch_size: int = 16, **kwargs):
    from marl_note.trainers import DecentralizedTrainer

    return DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=1, batch_size=batch_size, update_freq=16,
                                test_freq=4, episodes_per_train=episodes, episodes_per_test=1, seed=0,
                                distributed=ctx, **kwargs)


def _dqn(seed: int):
    from marl_note.agents.torch import DQN

    env = gym.make("CartPole-v1")
    return DQN(env.observation_space, env.action_space, hidden_sizes=(16,), learning_starts=16, seed=seed)


def _adaptive_run(ctx: DistributedContext) -> dict:
    """A short run with the adaptive batch: callbacks run on rank 0 alone, so the batch size and the learning
    rate it sets reach rank 1 only through the run loop's settings broadcast."""
    from marl_note.contrib.adaptive import adabatch

    trainer = _trainer(ctx, episodes=14, batch_size=16)
    agent = _dqn(seed=0)
    lr0 = agent.learning_rates()
    # objective="steps": the batch follows the measured noise alone (the time objective's cost estimate is
    # wall time, so the batch it picks moved with the machine's load: 16 kept on a loaded machine)
    cb = adabatch({"min": 4, "max": 64, "align": 2, "rate": 1.0, "smooth": 0.0}, num_samples=64, every=1,
                  objective="steps")
    trainer.train([agent], learning_mask=[1], callbacks=[cb], plot=False, progress=False)
    trainer.close()
    return {"rounds": cb.rounds, "batch": trainer.batch_size, "lr0": lr0, "lr": agent.learning_rates(),
            "weights": agent.nets.state_dict()}


def _rank(tmp: str, resume_from: str, results: str) -> None:
    """Every check in one launch (starting ranks that import torch costs many seconds on a loaded machine):
    one update, a resumed training run (results pickled to ``results``), then rank 1 dies in a second run."""
    from marl_note.contrib.distributed.torch.ddp import init_distributed, shutdown

    ctx = init_distributed("gloo", timeout=60)
    try:
        # each rank starts from other weights: prepare() must give every rank rank 0's
        one_update = _one_update(ctx, seed=ctx.rank)
        every_algorithm = _every_algorithm(ctx)
        set_then_update = _set_then_update(ctx)
        marker = os.path.join(tmp, f"last_fn_rank{ctx.rank}")
        trainer = _trainer(ctx, episodes=16, save_last_fn=lambda: open(marker, "w").close())
        agent = _dqn(seed=ctx.rank)
        stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False,
                              checkpoint_path=os.path.join(tmp, f"run_rank{ctx.rank}"), resume_from=resume_from)
        trainer.close()
        adaptive = _adaptive_run(ctx)
        with open(os.path.join(results, f"rank{ctx.rank}.pkl"), "wb") as f:
            pickle.dump({"one_update": one_update, "every_algorithm": every_algorithm, "set": set_then_update,
                         "weights": agent.nets.state_dict(), "updates": agent.updates,
                         "tests": len(stats["test_history"]), "episodes": stats["num_collected_episodes"],
                         "adaptive": adaptive}, f)
        calls = []

        def train_fn(episodes, steps):
            calls.append(steps)
            if ctx.rank == 1 and len(calls) == 3:
                os.kill(os.getpid(), signal.SIGKILL)

        _trainer(ctx, episodes=10_000, train_fn=train_fn).train([_dqn(0)], learning_mask=[1], plot=False,
                                                                progress=False)
    finally:
        shutdown()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """A single-process run checkpoints; two ranks resume it (after one synchronous update each)."""
    tmp = tmp_path_factory.mktemp("ranks")
    start = str(tmp / "single")
    first = _trainer(DistributedContext(), episodes=4)
    first.train([_dqn(0)], learning_mask=[1], plot=False, progress=False, checkpoint_path=start)
    first.close()
    results = tmp_path_factory.mktemp("results")
    began = time.monotonic()
    with pytest.raises(RankFailedError, match="rank 1 exited with code -9") as failed:
        launch(_rank, 2, str(tmp), start, str(results), timeout=110)
    after_kill = multiprocessing.active_children()
    ranks = []
    for r in range(2):
        with open(results / f"rank{r}.pkl", "rb") as f:
            ranks.append(pickle.load(f))
    return tmp, start, ranks, (failed.value, time.monotonic() - began, after_kill)


def test_two_rank_update_equals_one_process_update_on_the_global_batch(two_ranks):
    _, _, (r0, r1), _ = two_ranks
    single = _one_update(DistributedContext(), seed=0)
    assert set(r0["one_update"]) == set(single) == set(r1["one_update"])
    for key, value in single.items():
        np.testing.assert_allclose(r0["one_update"][key], value, atol=1e-5, err_msg=key)
        np.testing.assert_allclose(r1["one_update"][key], value, atol=1e-5, err_msg=key)


def test_every_algorithm_takes_the_same_steps_on_every_rank_from_its_own_data(two_ranks):
    _, _, (r0, r1), _ = two_ranks
    assert sorted(r0["every_algorithm"]) == ["DDPG", "MADDPG", "RL", "SAC"]
    for name, state in r0["every_algorithm"].items():
        assert len(state) > 4 and set(state) == set(r1["every_algorithm"][name])
        for key, value in state.items():
            np.testing.assert_allclose(r1["every_algorithm"][name][key], value, atol=1e-6, err_msg=f"{name} {key}")


def test_an_agent_rebuilt_by_set_after_prepare_still_averages_its_gradients(two_ranks):
    _, _, (r0, r1), _ = two_ranks
    assert r0["set"]["target_update"] == r1["set"]["target_update"] == 50
    assert len(r0["set"]["weights"]) >= 4
    for key, value in r0["set"]["weights"].items():  # each rank's own data: equal only through averaging
        np.testing.assert_allclose(r1["set"]["weights"][key], value, atol=1e-6, err_msg=key)


def test_a_distributed_step_measures_the_gradient_noise_scale_from_the_per_rank_and_averaged_gradients(two_ranks):
    """The step's own measurement equals one process's: small batch = one rank's rows (its |g|^2
    averaged over the ranks), big batch = the global batch, from rank 0's weights before the step."""
    from marl_note.agents.noise_scale import noise_scale_terms
    from marl_note.agents.torch import DQN

    _, _, (r0, r1), _ = two_ranks
    single = DQN(OBS, N_ACT, hidden_sizes=(16,), learning_starts=8, seed=0)
    batch = _transitions(GLOBAL_BATCH, np.random.default_rng(7))
    half = GLOBAL_BATCH // 2
    small = np.mean([single.noise_scale.grad_sq_norm(batch[:half]), single.noise_scale.grad_sq_norm(batch[half:])])
    g_sq, trace = noise_scale_terms(small, half, single.noise_scale.grad_sq_norm(batch), GLOBAL_BATCH)
    for rank in (r0, r1):
        count, got_g_sq, got_trace = rank["set"]["noise"]
        assert count == 1
        np.testing.assert_allclose([got_g_sq, got_trace], [g_sq, trace], rtol=1e-4)


def test_two_rank_training_stays_in_lockstep_and_rank_0_checkpoints_restore_in_one_process(two_ranks):
    from marl_note.trainers.run_state import load_run

    tmp, start, (r0, r1), _ = two_ranks
    before = load_run(start, [_dqn(0)])
    assert r0["updates"] == r1["updates"] > before.updates
    for key, value in r0["weights"].items():  # the same gradient steps from the same weights
        np.testing.assert_array_equal(r1["weights"][key], value, err_msg=key)
    assert r0["tests"] > len(before.history) == r1["tests"]  # rank 0 alone tests ...
    assert sorted(os.listdir(tmp)) == ["last_fn_rank0", "run_rank0", "single"]  # ... and saves
    restored = _dqn(5)
    run = load_run(str(tmp / "run_rank0"), [restored])
    assert run.updates == r0["updates"] == restored.updates
    weights = restored.nets.state_dict()
    for key, value in r0["weights"].items():
        np.testing.assert_array_equal(weights[key], value, err_msg=key)


def test_adaptive_batch_applies_rank_0s_values_on_every_rank(two_ranks):
    _, _, (r0, r1), _ = two_ranks
    a0, a1 = r0["adaptive"], r1["adaptive"]
    assert a0["rounds"] > 3 and a1["rounds"] == 0  # the callback ran on rank 0 alone
    assert a0["batch"] == a1["batch"] != 16 and a0["batch"] % 2 == 0
    assert a0["lr"] == a1["lr"] != a0["lr0"]  # the rate rule scaled it on rank 0, and rank 1 took it
    for key, value in a0["weights"].items():  # one batch size and rate: the ranks' steps stayed equal
        np.testing.assert_array_equal(a1["weights"][key], value, err_msg=key)


def test_a_killed_rank_ends_the_run_with_its_exit_code_and_leaves_no_process(two_ranks):
    *_, (error, seconds, after_kill) = two_ranks
    assert error.rank == 1 and error.exitcode == -signal.SIGKILL
    # rank 0 did not wait on its dead peer: its next collective raised, naming the failure
    assert list(error.others) == [0] and "RankLostError: rank 0: " in error.others[0], str(error)
    assert seconds < 110 and after_kill == []


def test_a_rank_that_raises_sends_back_its_traceback():
    def fail(x):
        if int(os.environ["RANK"]) == 1:
            raise ValueError(f"bad input {x}")
        time.sleep(600)  # terminated by the launcher long before

    start = time.monotonic()
    with pytest.raises(RankFailedError, match=r"(?s)rank 1 exited with code 1.*ValueError: bad input 3"):
        launch(fail, 2, 3, timeout=110, grace=0.5)
    # rank 0 was not awaited: well under the launcher's timeout, with room for slow starts on a loaded machine
    assert time.monotonic() - start < 90 and multiprocessing.active_children() == []


def test_bad_arguments_are_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="world_size"):
        launch(print, 0)
    with pytest.raises(ValueError, match="multiple of world_size=2"):
        class Loop:
            def broadcast(self, obj, src=0):
                return obj

            def barrier(self):
                pass

            def prepare(self, agent):
                pass
        _trainer(DistributedContext(rank=0, world_size=2, collective=Loop()), episodes=2, batch_size=15)


def _example():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "distributed_cartpole.py")
    spec = importlib.util.spec_from_file_location("distributed_cartpole", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_runs_in_one_process_and_refuses_an_unknown_backend():
    example = _example()
    out = example.train(episodes=6, batch_size=16, progress=False)
    assert out["rank"] == 0 and out["world_size"] == 1 and out["env_steps"] > 0
    with pytest.raises(ValueError, match="--backend must be 'torch' or 'tf', got 'jax'"):
        example.train(backend="jax")


def test_distribute_refuses_what_cannot_stay_in_lockstep_before_any_communication():
    from marl_note.agents import RandomAgent
    from marl_note.agents.torch import PPO
    from marl_note.contrib.distributed.torch.ddp import distribute

    with pytest.raises(ValueError, match="target_kl=None with several ranks"):
        distribute(PPO(OBS, N_ACT, hidden_sizes=(8,), target_kl=0.01, seed=0))
    with pytest.raises(TypeError, match="RandomAgent has no PyTorch networks"):
        distribute(RandomAgent(N_ACT))
