"""The numpy backend's compiled loops (:mod:`marl_note.agents.numpy.fused`, Numba) give the bits of its numpy
expressions: Adam's update alone and whole agents' steps, with the loops on (``MARL_NOTE_NUMBA=1``) and off."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.numpy import DQN, PPO, SAC, fused
from marl_note.agents.numpy.layers import Adam
from marl_note.types import Transitions

pytest.importorskip("numba")

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def flat_adam(start: np.ndarray, lr: float, betas: tuple[float, float]) -> Adam:
    """An Adam over two parameters that lie back to back in one buffer (as NumpyNetworks lays out a network)."""
    buf = start.copy()
    cut = len(buf) // 3
    return Adam([buf[:cut], buf[cut:]], lr=lr, betas=betas)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_compiled_adam_gives_the_numpy_passes_bits(dtype, monkeypatch):
    rng = np.random.default_rng(0)
    for case in range(12):
        n = int(rng.integers(3, 2000))
        lr, betas = float(10 ** rng.uniform(-5, -1)), (float(rng.uniform(0.5, 0.99)), float(rng.uniform(0.9, 0.9999)))
        start = rng.normal(size=n).astype(dtype)
        compiled, plain = flat_adam(start, lr, betas), flat_adam(start, lr, betas)
        assert compiled._flat is not None  # the one-buffer layout the loop runs on
        for step in range(1, 9):
            if step == 5:
                compiled.lr = plain.lr = lr / 3  # a learning-rate change between steps
            g = (rng.normal(size=n) * 10.0 ** rng.uniform(-8, 3)).astype(dtype)
            g[rng.integers(0, n, 3)] = [0.0, 1e-42, -1e-42]  # zeros and subnormals (float32's) pass through as well
            monkeypatch.setenv(fused.ENV_VAR, "1")
            compiled.step_flat(g)
            monkeypatch.setenv(fused.ENV_VAR, "0")
            plain.step_flat(g)
            for mine, theirs in ((compiled._flat, plain._flat), (compiled._m, plain._m), (compiled._v, plain._v)):
                assert same_bits(mine, theirs), (case, step)
        assert compiled.steps == plain.steps == [8, 8]
    assert "adam" in fused._state  # the loop was compiled and ran


def test_the_loop_refuses_arrays_it_cannot_take_and_writes_nothing():
    rng = np.random.default_rng(1)
    p, g, m, v = (rng.normal(size=8).astype(np.float32) for _ in range(4))
    before = [a.copy() for a in (p, g, m, v)]
    args = dict(betas=(0.9, 0.999), eps=1e-8, lr=1e-3, step=1)
    assert not fused.adam_update(p, g.astype(np.float64), m, v, **args)  # mixed dtypes
    assert not fused.adam_update(p, g[:4], m, v, **args)  # other lengths
    assert not fused.adam_update(p, g, np.zeros(16, np.float32)[::2], v, **args)  # not contiguous
    assert not fused.adam_update(p.reshape(2, 4), g.reshape(2, 4), m.reshape(2, 4), v.reshape(2, 4), **args)  # 2-D
    assert not fused.adam_update(p.astype(np.float16), g.astype(np.float16), m.astype(np.float16),
                                 v.astype(np.float16), **args)  # a dtype the loop is not for
    frozen = p.copy()
    frozen.flags.writeable = False
    assert not fused.adam_update(frozen, g, m, v, **args)
    for a, b in zip((p, g, m, v), before):
        assert same_bits(a, b)
    assert fused.adam_update(p, g, m, v, **args) and not same_bits(p, before[0])


def test_the_environment_variable_turns_the_loops_off_and_is_checked(monkeypatch):
    monkeypatch.setenv(fused.ENV_VAR, "0")
    assert not fused.available()
    p, g, m, v = (np.ones(4, np.float32) for _ in range(4))
    assert not fused.adam_update(p, g, m, v, betas=(0.9, 0.999), eps=1e-8, lr=1e-3, step=1)
    monkeypatch.setenv(fused.ENV_VAR, "yes")
    with pytest.raises(ValueError, match="MARL_NOTE_NUMBA must be 0 .* got 'yes'"):
        fused.available()
    monkeypatch.setenv(fused.ENV_VAR, "1")
    assert fused.available()


def test_without_numba_adam_takes_the_numpy_passes(monkeypatch):
    monkeypatch.setitem(fused._state, "numba", None)  # as when `import numba` fails
    assert not fused.available()
    start = np.random.default_rng(2).normal(size=30).astype(np.float32)
    opt = flat_adam(start, 1e-2, (0.9, 0.999))
    opt.step_flat(np.ones(30, np.float32))
    assert opt.steps == [1, 1] and np.allclose(opt._flat, start - 1e-2, atol=1e-6)  # Adam's first step: lr * sign(g)


def transitions(n: int, rng: np.random.Generator, act: np.ndarray) -> Transitions:
    return Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=act,
                       rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                       terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool))


def steps_state(make, feed, monkeypatch, numba: str) -> dict:
    monkeypatch.setenv(fused.ENV_VAR, numba)
    agent = make()
    rng = np.random.default_rng(3)
    for _ in range(4):
        feed(agent, rng)
    return agent.state_dict()


def dqn_learn(agent, rng):
    agent.learn(transitions(32, rng, rng.integers(0, 3, 32)))


def sac_learn(agent, rng):
    agent.learn(transitions(32, rng, rng.uniform(-1, 1, (32, 2)).astype(np.float32)))


def ppo_epoch(agent, rng):
    obs = rng.normal(size=(64, 4)).astype(np.float32)
    act = rng.integers(0, 3, 64)
    adv, ret = rng.normal(size=64).astype(np.float32), rng.normal(size=64).astype(np.float32)
    logp, w, mask = np.full(64, -np.log(3.0), np.float32), np.ones(64, np.float32), np.ones((64, 3), bool)
    for rows in np.split(np.arange(64), 4):
        agent.nets.train_step(obs[rows], act[rows], mask[rows], logp[rows], adv[rows], ret[rows], w[rows], who="PPO",
                              update=1)


@pytest.mark.parametrize("name", ["dqn", "sac", "ppo"])
def test_agents_learn_the_same_bits_with_the_loops_on_and_off(name, monkeypatch):
    make, feed = {
        "dqn": (lambda: DQN(OBS, gym.spaces.Discrete(3), hidden_sizes=(16, 16), seed=5, max_grad_norm=0.5), dqn_learn),
        "sac": (lambda: SAC(OBS, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), hidden_sizes=(16, 16), seed=5),
                sac_learn),
        "ppo": (lambda: PPO(OBS, gym.spaces.Discrete(3), hidden_sizes=(16, 16), seed=5), ppo_epoch),
    }[name]
    on, off = (steps_state(make, feed, monkeypatch, flag) for flag in ("1", "0"))
    assert on.keys() == off.keys()
    changed = [k for k in on if not same_bits(np.asarray(on[k]), np.asarray(off[k]))]
    assert not changed, changed
    start = make().state_dict()
    assert any(not np.array_equal(np.asarray(on[k]), np.asarray(start[k])) for k in on)  # the steps changed weights
