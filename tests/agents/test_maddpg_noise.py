"""MADDPG's exploration noise is kept per (agent, env): envs explore independently and only an
env whose episode ended has its Ornstein-Uhlenbeck state reset. The learner's actors output zeros
(their last layers are zero), so every explored action is the noise itself."""

import numpy as np
import pytest

from marl_note.agents.exploration.noise import GaussianWhiteNoiseProcess, OrnsteinUhlenbeckProcess
from marl_note.agents.exploration.per_env import PerEnvNoise
from marl_note.envs import SyncVectorEnv, adapt, make_spec
from marl_note.trainers import Collector
from tests.agents.maddpg_helpers import BACKENDS, maddpg_class, set_state
from tests.scripted_envs import BoxRaceEnv


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def ou():
    return OrnsteinUhlenbeckProcess(theta=0.15, sigma=0.3, size=(2,))


def learner(seed=0, backend="torch"):
    """A MADDPG over BoxRaceEnv's agents whose actors output zeros, exploring with OU noise."""
    spaces = BoxRaceEnv()
    m = maddpg_class(backend)({a: spaces.observation_space(a) for a in "ab"},
                              {a: spaces.action_space(a) for a in "ab"}, hidden_sizes=(4,),
                              noise={"a": ou(), "b": ou()}, seed=seed)
    set_state(m, {f"{a}.actor.2.{p}": np.zeros_like(m.state_dict()[f"{a}.actor.2.{p}"])
                  for a in "ab" for p in ("weight", "bias")})
    return m


def test_per_env_copies_are_independent_and_reset_alone():
    noise = PerEnvNoise(ou(), dim=2, seed=0)
    for _ in range(5):
        eps = noise.sample([0, 1])
    assert eps.shape == (2, 2) and not np.allclose(eps[0], eps[1])
    x1 = noise.processes[1].x_prev.copy()
    noise.reset([0])
    assert noise.processes[0].x_prev.tolist() == [0.0, 0.0]
    np.testing.assert_array_equal(noise.processes[1].x_prev, x1)
    assert noise.template.n_steps == 0 and noise.processes[1].n_steps == 5  # each copy anneals on its own
    white = PerEnvNoise(GaussianWhiteNoiseProcess(sigma=1.0, size=(3,), seed=1), dim=3, seed=1)
    first = white.sample([0, 1, 2])
    assert len({tuple(r) for r in first.round(6)}) == 3
    with pytest.raises(ValueError, match="size of one action"):
        PerEnvNoise(OrnsteinUhlenbeckProcess(theta=0.15, size=(4, 2)), dim=2, seed=0)


def test_two_envs_get_their_own_noise_and_only_the_ended_env_is_reset(backend):
    envs = [BoxRaceEnv(length=2), BoxRaceEnv(length=5)]  # env 0's episode ends after 2 steps
    spec = make_spec(adapt(BoxRaceEnv()))
    m = learner(backend=backend)
    col = Collector(SyncVectorEnv([lambda: envs[0], lambda: envs[1]]), spec, m.seat_agents(),
                    explore=[True, True], learn=[True, True])
    col.reset(seed=0)
    col.collect(n_steps=4)  # two steps of each env
    col.flush()  # MADDPG sees env 0's episode end
    for a in "ab":
        assert not np.allclose(envs[0].actions[0][a], envs[1].actions[0][a])  # different noise per env
        copies = m.noise[a].processes
        assert sorted(copies) == [0, 1]
        assert copies[0].x_prev.tolist() == [0.0, 0.0]  # env 0 restarted its OU process ...
        np.testing.assert_allclose(copies[1].x_prev, envs[1].actions[-1][a], atol=1e-6)  # ... env 1 did not
    stored = m.replay.get(np.arange(4))
    assert int(stored.truncated.all(axis=1).sum()) == 1  # env 0's second step ended its episode


def test_rows_are_envs_without_env_ids_and_observe_without_stream_resets_all():
    m = learner()
    m.act_agent("a", np.zeros((3, 1), np.float32), explore=True)
    assert sorted(m.noise["a"].processes) == [0, 1, 2]
    m.act_agent("a", np.zeros((2, 1), np.float32), explore=True, env_ids=np.array([5, 1]))
    assert sorted(m.noise["a"].processes) == [0, 1, 2, 5]
    with pytest.raises(ValueError, match="env_ids"):
        m.act_agent("a", np.zeros((2, 1), np.float32), explore=True, env_ids=np.array([0]))
    m.noise["a"].reset()
    assert all(not p.x_prev.any() for p in m.noise["a"].processes.values())


def test_noise_state_round_trip_per_env():
    m = learner(seed=0)
    obs = np.zeros((2, 1), np.float32)
    for _ in range(3):
        m.act_agent("b", obs, explore=True, env_ids=np.array([0, 3]))
    state = m.state_dict()
    assert {"b.noise.env_seed", "b.noise.env.0.x_prev", "b.noise.env.3.rng", "b.noise.n_steps"} <= set(state)
    fresh = learner(seed=1)
    fresh.load_state_dict(state)
    assert sorted(fresh.noise["b"].processes) == [0, 3]
    np.testing.assert_array_equal(fresh.act_agent("b", obs, explore=True, env_ids=np.array([0, 3])),
                                  m.act_agent("b", obs, explore=True, env_ids=np.array([0, 3])))
    # copies made after the restore are seeded like the original's
    np.testing.assert_array_equal(fresh.act_agent("b", obs, explore=True, env_ids=np.array([7, 8])),
                                  m.act_agent("b", obs, explore=True, env_ids=np.array([7, 8])))
    # a state with one shared process (no env copies) restores the template
    legacy = {k: v for k, v in state.items() if ".noise.env" not in k}
    legacy["b.noise.x_prev"] = np.array([0.5, -0.5])
    old = learner(seed=2)
    old.load_state_dict(legacy)
    assert old.noise["b"].processes == {} and old.noise["b"].template.x_prev.tolist() == [0.5, -0.5]
    assert old.noise["b"].process(0).x_prev.tolist() == [0.5, -0.5]  # copies start from the template


def test_noise_copies_are_checked_like_their_template_before_loading():
    from marl_note.agents.checkpoints import CheckpointError
    from marl_note.agents.checkpoints.state_check import check_agent_state, load_checked

    m = learner(seed=0)
    obs = np.zeros((2, 1), np.float32)
    m.act_agent("b", obs, explore=True, env_ids=np.array([0, 3]))
    state = m.state_dict()
    fresh = learner(seed=1)  # has no copies yet: the saved ones are checked against the template's arrays
    checked, live = check_agent_state(fresh, state, "demo")
    load_checked(fresh, checked, live, "demo")
    assert sorted(fresh.noise["b"].processes) == [0, 3]
    bad = {**state, "b.noise.env.3.x_prev": np.zeros(5)}
    with pytest.raises(CheckpointError, match=r"'b.noise.env.3.x_prev' has shape \(5,\), expected \(2,\)"):
        check_agent_state(learner(seed=1), bad, "demo")
    without = {k: v for k, v in state.items() if ".noise.env." not in k}  # an agent with copies loads a state
    checked, live = check_agent_state(m, without, "demo")                # without them (they are dropped)
    load_checked(m, checked, live, "demo")
    assert m.noise["b"].processes == {}
