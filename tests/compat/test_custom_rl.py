"""User-defined agents on the RL base classes (torch and TF): learning, several optimisers, errors, saving."""
import copy
import importlib
import time

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.exploration.policies import EpsGreedyQPolicy
from tests.agents.torch.helpers import Corridor, greedy_return, train

torch = pytest.importorskip("torch")
nn = torch.nn
from marl_note.compat.torch import RL as TorchRL  # noqa: E402

OPTIMAL = 1.0 - 0.05 * 4  # Corridor(length=6)
OBS = gym.spaces.Box(-1, 1, (3,), np.float32)


def tf_modules():
    tf = pytest.importorskip("tensorflow")
    keras = importlib.import_module("keras")
    return tf, keras, importlib.import_module("marl_note.agents.tf").RL


def sample_batch(n=16, seed=0):
    from marl_note.types import Transitions
    rng = np.random.default_rng(seed)
    return Transitions(obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32), act=rng.integers(0, 2, n),
                       rew=rng.normal(size=n).astype(np.float32),
                       next_obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                       terminated=rng.random(n) < 0.3, truncated=np.zeros(n, bool))


# ------------------------------------------------------------------ torch agents

class TorchDQN(TorchRL):
    def __init__(self, observation_space, action_space, hidden=32, lr=1e-3, seed=None):
        super().__init__(observation_space, action_space, learning_starts=200, update_steps=8, seed=seed,
                         policy=EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=1500))
        g = torch.Generator().manual_seed(0 if seed is None else seed)
        self.q = nn.Sequential(nn.Linear(self.obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, self.n_actions))
        with torch.no_grad():
            for p in self.q.parameters():
                p.uniform_(-0.3, 0.3, generator=g)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)

    def action(self, s):
        return self.q(s)

    def __call__(self, s, a, next_s, r, d):
        with torch.no_grad():
            y = r + self.gamma * (1 - d) * self.target(next_s).max(1).values
        return nn.functional.smooth_l1_loss(self.q(s).gather(1, a[:, None]).squeeze(1), y)

    def update_param(self):
        if self.updates % 50 == 0:
            self.hard_update(self.target, self.q)


class TorchTwo(TorchRL):
    """Two linear nets, two SGD optimisers: loss 0 reaches both nets but may only move ``a``."""

    def __init__(self, observation_space, action_space, seed=None):
        super().__init__(observation_space, action_space, learning_starts=1, seed=seed)
        self.a = nn.Linear(self.obs_dim, self.n_actions)
        self.b = nn.Linear(self.obs_dim, self.n_actions)
        self.optimizers = [torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.Adam(self.b.parameters(), lr=0.1)]

    def action(self, s):
        return self.a(s) + self.b(s)

    def __call__(self, s, a, next_s, r, d):
        return [((self.a(s) + self.b(s)).sum(1) - r).pow(2).mean(), self.b(s).pow(2).mean()]


def test_torch_custom_dqn_learns_corridor():
    agent = TorchDQN(Corridor().observation_space, Corridor().action_space, seed=0)
    start = time.process_time()  # CPU seconds: the bound holds on a loaded machine too
    train(agent, Corridor, agent_steps=3000)
    assert time.process_time() - start < 20
    assert np.isclose(greedy_return(agent, Corridor()), OPTIMAL)
    assert agent.updates > 0 and agent.policy.eps == 0.05


class TorchPlain(TorchRL):
    """Built with torch's own initialisers, as users write them: the seed must reach them."""

    def __init__(self, observation_space, action_space, seed=None):
        super().__init__(observation_space, action_space, learning_starts=1, seed=seed)
        self.q = nn.Sequential(nn.Linear(self.obs_dim, 16), nn.ReLU(), nn.Linear(16, self.n_actions))
        self.optimizer = torch.optim.Adam(self.q.parameters())

    def action(self, s):
        return self.q(s)

    def __call__(self, s, a, next_s, r, d):
        return self.q(s).pow(2).mean()


def test_torch_seed_reaches_the_subclass_modules():
    first, again, other = (TorchPlain(OBS, gym.spaces.Discrete(2), seed=s).state_dict() for s in (0, 0, 1))
    weights = [k for k in first if k.startswith("q.")]
    assert weights and all(np.array_equal(first[k], again[k]) for k in weights)
    assert not all(np.array_equal(first[k], other[k]) for k in weights)


def test_tf_seed_reaches_the_subclass_layers():
    tf, keras, TFRL = tf_modules()

    class Plain(TFRL):
        def __init__(self, observation_space, action_space, seed=None):
            super().__init__(observation_space, action_space, learning_starts=1, seed=seed)
            self.q = keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(16, "relu"),
                                       keras.layers.Dense(self.n_actions)])
            self.optimizer = keras.optimizers.Adam()

        def action(self, s):
            return self.q(s)

        def __call__(self, s, a, next_s, r, d):
            return tf.reduce_mean(tf.square(self.q(s)))

    first, again, other = (Plain(OBS, gym.spaces.Discrete(2), seed=s).state_dict() for s in (0, 0, 1))
    weights = [k for k in first if k.startswith("q.")]
    assert weights and all(np.array_equal(first[k], again[k]) for k in weights)
    assert not all(np.array_equal(first[k], other[k]) for k in weights)


def test_torch_several_optimizers_train_their_own_group():
    agent = TorchTwo(OBS, gym.spaces.Discrete(2), seed=0)
    a0 = {k: v.clone() for k, v in agent.a.state_dict().items()}
    b_ref = copy.deepcopy(agent.b)
    agent.observe(sample_batch())
    metrics = agent.update(batch_size=8)
    assert metrics["gradient_steps"] == 1 and {"loss", "loss_0", "loss_1"} <= set(metrics)
    s = agent.obs_tensor(agent.batch.obs)
    r = torch.as_tensor(agent.batch.rew)
    # a: one SGD step on loss 0 (with b as it was)
    a_ref = nn.Linear(3, 2)
    a_ref.load_state_dict(a0)
    loss0 = ((a_ref(s) + b_ref(s).detach()).sum(1) - r).pow(2).mean()
    torch.optim.SGD(a_ref.parameters(), lr=0.1).zero_grad()
    loss0.backward()
    for p_ref, p in zip(a_ref.parameters(), agent.a.parameters()):
        torch.testing.assert_close(p, p_ref - 0.1 * p_ref.grad)
    # b: one Adam step on loss 1 only (loss 0 does not reach b's optimiser)
    opt = torch.optim.Adam(b_ref.parameters(), lr=0.1)
    b_ref(s).pow(2).mean().backward()
    opt.step()
    for p_ref, p in zip(b_ref.parameters(), agent.b.parameters()):
        torch.testing.assert_close(p, p_ref)


def test_torch_custom_agent_save_restore(tmp_path):
    agent = TorchTwo(OBS, gym.spaces.Discrete(2), seed=3)
    agent.observe(sample_batch())
    agent.update(batch_size=8)
    again = TorchTwo.restore(agent.save(tmp_path / "two.zip", include_replay=True))
    assert again.config == {"seed": 3} and len(again.replay) == 16
    sa, sb = agent.state_dict(), again.state_dict()
    assert "optimizers.1.0.exp_avg" in sa and sorted(sa) == sorted(sb)
    assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    obs = sample_batch(32, seed=5).obs
    assert (again.act(obs) == agent.act(obs)).all()
    assert again.update(8)["loss"] == agent.update(8)["loss"]  # same replay, rng and optimiser state


def test_torch_box_actions_and_noise():
    class Actor(TorchRL):
        def __init__(self, observation_space, action_space):
            super().__init__(observation_space, action_space, seed=0)
            self.pi = nn.Linear(self.obs_dim, 2)
            self.optimizer = torch.optim.SGD(self.pi.parameters(), lr=0.1)

        def action(self, s):
            return 5 * self.pi(s)

        def __call__(self, s, a, next_s, r, d):
            return (self.pi(s) - a).pow(2).mean()

    agent = Actor(OBS, gym.spaces.Box(-1, 1, (2,), np.float32))
    obs = sample_batch(64).obs
    greedy, noisy = agent.act(obs), agent.act(obs, explore=True)
    assert greedy.shape == (64, 2) and greedy.dtype == np.float32 and np.abs(greedy).max() > 1  # raw output
    assert np.abs(noisy).max() <= 1 and not np.allclose(noisy, np.clip(greedy, -1, 1))
    assert agent.state_dict()["noise.n_steps"] == 64


def test_missing_methods_and_setup_errors():
    class NoAction(TorchRL):
        def __call__(self, s, a, next_s, r, d):
            return 0

    class NoLoss(TorchRL):
        def action(self, s):
            return s

    class Nothing(TorchRL):
        pass

    with pytest.raises(TypeError, match=r"NoAction must define action\(self, s\) to subclass"):
        NoAction(OBS, gym.spaces.Discrete(2))
    with pytest.raises(TypeError, match=r"NoLoss must define __call__\(self, s, a, next_s, r, d\)"):
        NoLoss(OBS, gym.spaces.Discrete(2))
    with pytest.raises(TypeError, match=r"must define action\(self, s\) and __call__"):
        Nothing(OBS, gym.spaces.Discrete(2))

    class NoSuper(TorchDQN):
        def __init__(self, observation_space, action_space):
            self.q = nn.Linear(3, 2)

    with pytest.raises(TypeError, match="must call super"):
        NoSuper(OBS, gym.spaces.Discrete(2))

    class NoOptimizer(TorchDQN):
        def __init__(self, observation_space, action_space):
            TorchRL.__init__(self, observation_space, action_space)
            self.q = nn.Linear(3, 2)

    with pytest.raises(TypeError, match="self.optimizer"):
        NoOptimizer(OBS, gym.spaces.Discrete(2))

    class OneLossTwoOpts(TorchTwo):
        def __call__(self, s, a, next_s, r, d):
            return self.a(s).sum()

    agent = OneLossTwoOpts(OBS, gym.spaces.Discrete(2))
    agent.observe(sample_batch())
    with pytest.raises(ValueError, match="returned 1 losses for 2 optimizers"):
        agent.update(4)
    with pytest.raises(TypeError, match="policy= is for Discrete"):
        TorchDQN.__bases__[0].__init__(agent, OBS, gym.spaces.Box(-1, 1, (1,)), policy=EpsGreedyQPolicy())


# ------------------------------------------------------------------ TF agents

def make_tf_classes():
    tf, keras, TFRL = tf_modules()

    class TFDQN(TFRL):
        def __init__(self, observation_space, action_space, hidden=32, lr=1e-3, seed=None):
            super().__init__(observation_space, action_space, learning_starts=200, update_steps=8, seed=seed,
                             policy=EpsGreedyQPolicy(1.0, 0.05, n_steps_annealing=1500))
            init = keras.initializers.RandomUniform(-0.3, 0.3, seed=seed)

            def net():
                return keras.Sequential([keras.Input((self.obs_dim,)),
                                         keras.layers.Dense(hidden, "relu", kernel_initializer=init),
                                         keras.layers.Dense(self.n_actions, kernel_initializer=init)])
            self.q, self.target = net(), net()
            self.hard_update(self.target, self.q)
            self.optimizer = keras.optimizers.Adam(lr)

        def action(self, s):
            return self.q(s)

        def __call__(self, s, a, next_s, r, d):
            y = tf.stop_gradient(r + self.gamma * (1 - d) * tf.reduce_max(self.target(next_s), 1))
            q = tf.gather(self.q(s), a, axis=1, batch_dims=1)
            return keras.losses.Huber()(y, q)

        def update_param(self):
            if self.updates % 50 == 0:
                self.hard_update(self.target, self.q)

    class TFTwo(TFRL):
        def __init__(self, observation_space, action_space, seed=None):
            super().__init__(observation_space, action_space, learning_starts=1, seed=seed)
            self.a = keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(self.n_actions)])
            self.b = keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(self.n_actions)])
            self.optimizers = [keras.optimizers.SGD(0.1), keras.optimizers.Adam(0.1)]
            self.param_groups = [self.a, self.b]

        def action(self, s):
            return self.a(s) + self.b(s)

        def __call__(self, s, a, next_s, r, d):
            return [tf.reduce_mean(tf.square(tf.reduce_sum(self.a(s) + self.b(s), 1) - r)),
                    tf.reduce_mean(tf.square(self.b(s)))]

    return tf, keras, TFDQN, TFTwo


def test_tf_custom_dqn_learns_corridor():
    tf, keras, TFDQN, _ = make_tf_classes()
    agent = TFDQN(Corridor().observation_space, Corridor().action_space, seed=0)
    start = time.process_time()  # CPU seconds: the bound holds on a loaded machine too
    train(agent, Corridor, agent_steps=3000)
    assert time.process_time() - start < 30
    assert np.isclose(greedy_return(agent, Corridor()), OPTIMAL)


def test_tf_several_optimizers_and_saving(tmp_path):
    tf, keras, _, TFTwo = make_tf_classes()
    agent = TFTwo(OBS, gym.spaces.Discrete(2), seed=0)
    a0 = [w.numpy().copy() for w in agent.a.weights]
    b0 = [w.numpy().copy() for w in agent.b.weights]
    agent.observe(sample_batch())
    assert {"loss_0", "loss_1"} <= set(agent.update(batch_size=8))
    s, r = agent.obs_tensor(agent.batch.obs), tf.constant(agent.batch.rew)
    a_vars, b_vars = [tf.Variable(w) for w in a0], [tf.Variable(w) for w in b0]

    def lin(x, vs):
        return x @ vs[0] + vs[1]

    with tf.GradientTape(persistent=True) as tape:
        loss0 = tf.reduce_mean(tf.square(tf.reduce_sum(lin(s, a_vars) + lin(s, b_vars), 1) - r))
        loss1 = tf.reduce_mean(tf.square(lin(s, b_vars)))
    for w, v, g in zip(agent.a.weights, a_vars, tape.gradient(loss0, a_vars)):  # SGD on loss 0, a only
        np.testing.assert_allclose(w.numpy(), (v - 0.1 * g).numpy(), rtol=1e-5, atol=1e-6)
    # the first Adam step on loss 1: lr * g / (|g| + eps / sqrt(1 - beta_2)), close to lr * sign(g) only
    # where |g| is far above that eps (the unseeded Dense weights here sometimes give a gradient near it)
    adam = agent.optimizers[1]
    eps = float(adam.epsilon) / np.sqrt(1.0 - float(adam.beta_2))
    for w, v, g in zip(agent.b.weights, b_vars, tape.gradient(loss1, b_vars)):
        np.testing.assert_allclose(w.numpy(), (v - 0.1 * g / (tf.abs(g) + eps)).numpy(), rtol=1e-4, atol=1e-6)
    agent.update(batch_size=8)  # a traced step after the eager first one
    again = TFTwo.restore(agent.save(tmp_path / "two", include_replay=True))
    sa, sb = agent.state_dict(), again.state_dict()
    assert "optimizers.1.var_index" in sa and sorted(sa) == sorted(sb)
    assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    np.testing.assert_allclose(again.update(8)["loss"], agent.update(8)["loss"], rtol=1e-6)


def test_tf_custom_dqn_save_restore_and_errors(tmp_path):
    tf, keras, TFDQN, _ = make_tf_classes()
    agent = TFDQN(OBS, gym.spaces.Discrete(2), hidden=8, seed=1)
    agent.observe(sample_batch(256))
    agent.update(16)
    again = TFDQN.restore(agent.save(tmp_path / "dqn.zip"))
    assert again.config == {"hidden": 8, "lr": 1e-3, "seed": 1}
    obs = sample_batch(64, seed=9).obs
    assert (again.act(obs) == agent.act(obs)).all() and again.updates == agent.updates == 8
    assert (again.act(obs, explore=True) == agent.act(obs, explore=True)).all()
    from marl_note.agents.checkpoints import CheckpointError
    with pytest.raises(CheckpointError, match="has shape"):
        TFDQN.restore(agent.save(tmp_path / "big"), hidden=16)

    _, _, TFRL = tf_modules()

    class NoLoss(TFRL):
        def action(self, s):
            return s

    with pytest.raises(TypeError, match=r"NoLoss must define __call__"):
        NoLoss(OBS, gym.spaces.Discrete(2))


# ------------------------------------------------------------------ the shared numpy core


class TorchLinear(TorchRL):
    def __init__(self, observation_space, action_space, seed=None, **options):
        super().__init__(observation_space, action_space, seed=seed, **options)
        self.pi = nn.Linear(self.obs_dim, 2)
        self.optimizer = torch.optim.SGD(self.pi.parameters(), lr=0.1)

    def action(self, s):
        return self.pi(s)

    def __call__(self, s, a, next_s, r, d):
        return (self.pi(s) - a).pow(2).mean()


def test_core_is_numpy_only():
    import subprocess
    import sys
    code = ("import sys, marl_note.compat.rl as m; "
            "assert not {'torch', 'tensorflow', 'keras'} & set(sys.modules), sorted(sys.modules); print(m.RLCore)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_same_seed_same_exploration_state_in_both_backends():
    """The core draws every generator seed, so the default noise and replay rngs match across backends."""
    _, keras, TFRL = tf_modules()

    class TFLinear(TFRL):
        def __init__(self, observation_space, action_space, seed=None):
            super().__init__(observation_space, action_space, seed=seed)
            self.pi = keras.Sequential([keras.Input((self.obs_dim,)), keras.layers.Dense(2)])
            self.optimizer = keras.optimizers.SGD(0.1)

        def action(self, s):
            return self.pi(s)

        def __call__(self, s, a, next_s, r, d):
            return keras.ops.mean(keras.ops.square(self.pi(s) - a))

    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    torch_agent, tf_agent = TorchLinear(OBS, box, seed=4), TFLinear(OBS, box, seed=4)
    ts, fs = torch_agent.state_dict(), tf_agent.state_dict()
    assert "torch_rng" not in ts
    for key in ("rng", "noise.rng", "noise.n_steps", "agent_steps", "updates"):
        assert np.array_equal(ts[key], fs[key]), key
    assert np.array_equal(torch_agent.replay.state_dict()["rng_state"], tf_agent.replay.state_dict()["rng_state"])


def test_legacy_torch_rng_key_is_ignored_and_backend_options_are_checked():
    agent = TorchLinear(OBS, gym.spaces.Box(-1, 1, (2,), np.float32), seed=0)
    state = agent.state_dict()
    agent.load_state_dict({**state, "torch_rng": np.zeros(5056, np.uint8)})  # written by release 0.1.0
    with pytest.raises(TypeError, match=r"unexpected argument\(s\) \['tf_function'\]; the torch RL takes \['device'\]"):
        TorchLinear(OBS, gym.spaces.Box(-1, 1, (2,)), tf_function=False)
    with pytest.raises(ValueError, match="learning_starts must be a non-negative integer"):
        TorchLinear(OBS, gym.spaces.Box(-1, 1, (2,)), learning_starts=-1)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\]"):
        TorchLinear(OBS, gym.spaces.Box(-1, 1, (2,)), gamma=2.0)

    class Clash(TorchLinear):
        def __init__(self, observation_space, action_space):
            super().__init__(observation_space, action_space)
            self.nets = nn.ModuleList([self.pi])

    with pytest.raises(TypeError, match="self.nets is the RL base class's own attribute"):
        Clash(OBS, gym.spaces.Box(-1, 1, (2,)))
