"""The numpy backend (marl_note.agents.numpy): per-layer gradients against finite differences, Adam
and clipping against torch's, one-update parity of DQN with torch for each option, checkpoints
between numpy, torch and TF, the refusals, and a run that imports no framework."""
import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.dqn import DQNConfig, q_net_weights
from marl_note.agents.networks import ACTIVATIONS, mlp_weights
from marl_note.agents.numpy import DQN
from marl_note.agents.numpy.dqn import DuelingQNet
from marl_note.agents.numpy.layers import MLP, Adam, Dense, clip_grad_norm
from marl_note.agents.numpy.networks import NumpyBackendError
from marl_note.types import NonFiniteError, Transitions

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(5)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def float64(params):
    return {k: v.astype(np.float64) for k, v in params.items()}


def numeric_grad(f, arr, eps=1e-6):
    """Central differences of the scalar ``f()`` with respect to every entry of ``arr`` (changed in place)."""
    out = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        old = arr[i]
        arr[i] = old + eps
        up = f()
        arr[i] = old - eps
        down = f()
        arr[i] = old
        out[i] = (up - down) / (2 * eps)
    return out


def check_grads(net, params, x, rng):
    """``net``'s backward pass (parameters and input) against finite differences of ``sum(forward * c)``."""
    y, _ = net.forward(x)
    c = rng.normal(size=y.shape)

    def loss():
        return float((net.forward(x)[0] * c).sum())

    grads = {}
    _, cache = net.forward(x)
    if isinstance(net, DuelingQNet):  # its input is the observation: no input gradient
        net.backward(c, cache, grads)
        grad_x = None
    else:
        grad_x = net.backward(c, cache, grads, need_input=True)
    assert sorted(grads) == sorted(params)
    for key, arr in params.items():
        np.testing.assert_allclose(grads[key], numeric_grad(loss, arr), rtol=1e-5, atol=1e-7, err_msg=key)
    if grad_x is not None:
        np.testing.assert_allclose(grad_x, numeric_grad(loss, x), rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------- gradient checks

@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
def test_dense_layer_gradients_match_finite_differences(activation):
    rng = np.random.default_rng(0)
    params = {"l.weight": rng.normal(size=(3, 4)), "l.bias": rng.normal(size=3)}
    x = rng.normal(size=(5, 4))
    x[0, :] = 0.0  # relu/elu near their kink: the bias decides
    check_grads(Dense(params, "l", activation), params, x, rng)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_mlp_gradients_match_finite_differences(activation):
    rng = np.random.default_rng(1)
    params = float64(mlp_weights("net", 3, (6, 5), 2, rng))
    check_grads(MLP(params, "net", activation), params, rng.normal(size=(7, 3)), rng)


def test_dueling_head_gradients_match_finite_differences():
    rng = np.random.default_rng(2)
    params = float64(q_net_weights("q", 3, 4, DQNConfig(hidden_sizes=(6,), dueling=True), rng))
    check_grads(DuelingQNet(params, "q", "tanh"), params, rng.normal(size=(5, 3)), rng)


@pytest.mark.parametrize("criterion", ["huber", "mse"])
def test_dqn_loss_gradient_matches_finite_differences(criterion):
    agent = DQN(OBS, ACT, hidden_sizes=(6,), criterion=criterion, seed=0)
    nets = agent.nets
    params = float64(nets.modules["q_net"])  # the check runs in float64 through the same loss code
    nets.q_net = MLP(params, "q_net", "relu")
    rng = np.random.default_rng(3)
    b = agent._arrays(Transitions(obs=rng.normal(size=(6, 4)) * 3, act=rng.integers(0, 5, 6), rew=rng.normal(size=6),
                                 next_obs=rng.normal(size=(6, 4)), terminated=np.zeros(6, bool),
                                 truncated=np.zeros(6, bool), weights=rng.random(6)))
    b = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in b.items()}
    target = rng.normal(size=6) * 2  # some rows beyond Huber's quadratic zone

    def loss():
        return nets._loss(b, target)[0]

    *_, grads = nets._loss(b, target)
    for key, arr in params.items():
        np.testing.assert_allclose(grads[key], numeric_grad(loss, arr), rtol=1e-5, atol=1e-7, err_msg=key)


# --------------------------------------------------------------------------- Adam, clipping: torch's

def test_adam_matches_torch_adam_step_by_step_with_a_learning_rate_change():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    arrays = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=3).astype(np.float32)]
    ours = Adam([a.copy() for a in arrays], lr=1e-2)
    params = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in arrays]
    theirs = torch.optim.Adam(params, lr=1e-2)
    for step in range(5):
        if step == 3:
            ours.lr = 3e-3
            theirs.param_groups[0]["lr"] = 3e-3
        grads = [rng.normal(size=a.shape).astype(np.float32) * 10.0 ** (step - 2) for a in arrays]
        ours.step(grads)
        for p, g in zip(params, grads):
            p.grad = torch.from_numpy(g)
        theirs.step()
    for mine, p in zip(ours.params, params):
        np.testing.assert_allclose(mine, p.detach().numpy(), rtol=0, atol=1e-6)
    saved = theirs.state_dict()["state"]
    state = ours.state("optimizer")
    for i in range(2):
        assert float(state[f"optimizer.{i}.step"]) == float(saved[i]["step"]) == 5
        np.testing.assert_allclose(state[f"optimizer.{i}.exp_avg_sq"], saved[i]["exp_avg_sq"].numpy(), rtol=1e-5)


@pytest.mark.parametrize("max_norm", [None, 0.5, 1e6])
def test_clip_grad_norm_matches_torch(max_norm):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    grads = [rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=4).astype(np.float32)]
    params = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.from_numpy(g.copy())
    if max_norm is None:
        expected = float(torch.nn.utils.get_total_norm([p.grad for p in params]))
    else:
        expected = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    assert clip_grad_norm(grads, max_norm) == pytest.approx(expected, rel=1e-6)
    for g, p in zip(grads, params):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-6)


# --------------------------------------------------------------------------- one-update parity with torch

def batch(n, rng, obs_dim=4, n_act=5, **over):
    t = dict(obs=rng.normal(size=(n, obs_dim)).astype(np.float32), act=rng.integers(0, n_act, n),
             rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
             terminated=rng.random(n) < 0.3, truncated=rng.random(n) < 0.2, next_mask=rng.random((n, n_act)) < 0.6)
    t.update(over)
    return Transitions(**t)


def assert_same_state(a, b, atol=1e-5, skip=("rng",)):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys(), set(sa) ^ set(sb)
    for k in sa:
        if k in skip:
            continue
        x, y = np.asarray(sa[k]), np.asarray(sb[k])
        assert x.shape == y.shape, k
        if x.dtype.kind == "f":
            np.testing.assert_allclose(x, y, rtol=0, atol=atol, err_msg=k)
        else:
            np.testing.assert_array_equal(x, y, err_msg=k)


OPTIONS = {
    "default": {}, "no double": dict(double=False), "dueling": dict(dueling=True), "mse": dict(criterion="mse"),
    "clipped": dict(max_grad_norm=0.05), "unclipped": dict(max_grad_norm=None), "polyak": dict(tau=0.1),
    "hard copy": dict(target_update=1), "tanh": dict(activation="tanh"), "elu": dict(activation="elu"),
    "gelu dueling": dict(activation="gelu", dueling=True), "lr": dict(lr=3e-4),
}


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_one_update_gives_torchs_weights(options):
    """From identical weights and identical batches (importance weights, n-step discounts, masks), each
    update gives torch's weights, optimiser slots and target network to 1e-5."""
    tdqn = pytest.importorskip("marl_note.agents.torch").DQN
    ours, theirs = (cls(OBS, ACT, hidden_sizes=(64, 64), seed=3, **options) for cls in (DQN, tdqn))
    assert_same_state(ours, theirs, atol=0)
    rng = np.random.default_rng(1)
    for _ in range(3):
        b = batch(64, rng, weights=(rng.random(64) * 2).astype(np.float32),
                  discount=(0.9 ** rng.integers(1, 4, 64)).astype(np.float32))
        mine, torchs = ours.learn(b), theirs.learn(b)
        assert_same_state(ours, theirs)
        assert mine.keys() == torchs.keys()
        for k in mine:
            assert mine[k] == pytest.approx(torchs[k], rel=1e-5, abs=1e-6), k


def _bit_flips(env, n_episodes, seed):
    """Transitions of random episodes of a goal env (dict observations), one step each."""
    rng = np.random.default_rng(seed)
    out = []
    for episode in range(n_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            a = int(rng.integers(0, env.action_space.n))
            nxt, r, term, trunc, _ = env.step(a)
            out.append(Transitions(obs={k: v[None] for k, v in obs.items()}, act=np.array([a]), rew=np.array([r]),
                                   next_obs={k: v[None] for k, v in nxt.items()}, terminated=np.array([term]),
                                   truncated=np.array([trunc])))
            obs, done = nxt, term or trunc
    return out


@pytest.mark.parametrize("options", [dict(prioritized=True), dict(num_steps=3), dict(num_steps=2, prioritized=True),
                                     "her"], ids=["prioritized", "n-step", "n-step prioritized", "her"])
def test_updates_from_the_agents_own_replay_match_torch(options):
    """The replay options end to end: the same stored data and seed sample the same batches; prioritized
    replay gets torch's |TD| back (the next batches agree), n-step its discounts, HER its relabelled goals."""
    tdqn = pytest.importorskip("marl_note.agents.torch").DQN
    common = dict(hidden_sizes=(32, 32), seed=5, learning_starts=16, update_steps=2)
    if options == "her":
        from marl_note.envs.goal_envs import BitFlippingEnv

        env = BitFlippingEnv(n_bits=4, max_steps=6)
        options = dict(her=dict(strategy="future", k=2), compute_reward=env.compute_reward)
        spaces = (env.observation_space, env.action_space)
        stream = _bit_flips(env, 8, seed=0)
    else:
        spaces = (OBS, ACT)
        rng = np.random.default_rng(2)
        stream = [batch(8, rng, stream=np.arange(8), terminated=rng.random(8) < 0.1) for _ in range(6)]
    ours, theirs = (cls(*spaces, **common, **options) for cls in (DQN, tdqn))
    for t in stream:
        ours.observe(t)
        theirs.observe(t)
        assert ours.update(16) == pytest.approx(theirs.update(16), rel=1e-5, abs=1e-6)
    assert ours.updates == theirs.updates > 4
    assert_same_state(ours, theirs)


# --------------------------------------------------------------------------- checkpoints between backends

def test_checkpoint_round_trip_numpy_torch_tf_numpy(tmp_path):
    """A numpy-trained agent restores in torch, torch's checkpoint in TF, TF's back in numpy: the same
    state each time, and one more update from it gives the same weights in numpy as in torch."""
    torch_agents = pytest.importorskip("marl_note.agents.torch")
    pytest.importorskip("tensorflow")
    from marl_note.agents import tf as tf_agents

    rng = np.random.default_rng(6)
    agent = DQN(OBS, ACT, hidden_sizes=(16,), dueling=True, seed=0, learning_starts=8)
    agent.observe(batch(32, rng))
    agent.update(8)
    agent.set_learning_rate(5e-4)
    assert agent.updates > 0
    path = agent.save(str(tmp_path / "numpy"))
    in_torch = torch_agents.DQN.restore(path)
    assert_same_state(in_torch, agent, atol=0, skip=())
    in_tf = tf_agents.DQN.restore(in_torch.save(str(tmp_path / "torch")))
    assert_same_state(in_tf, agent, atol=0, skip=())
    back = DQN.restore(in_tf.save(str(tmp_path / "tf")))
    assert type(back) is DQN and back.learning_rates() == {"optimizer": 5e-4}
    assert_same_state(back, agent, atol=0, skip=())
    b = batch(16, rng, weights=np.ones(16, np.float32))
    back.learn(b)
    in_torch.learn(b)
    assert_same_state(back, in_torch)


def test_restore_picks_the_recorded_numpy_backend(tmp_path):
    from marl_note.agents.checkpoints.restoring import restore

    path = DQN(OBS, ACT, hidden_sizes=(8,), seed=0).save(str(tmp_path / "ck"))
    assert type(restore(path)) is DQN


# --------------------------------------------------------------------------- refusals

def user_torso(shape):  # a framework module factory: never called by the numpy backend
    raise AssertionError("the numpy backend called a user torso")


def test_conv_and_user_torsos_are_refused_naming_torch_and_tf():
    image = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    with pytest.raises(NumpyBackendError, match=r"conv torso \(torso='conv'\): use marl_note.agents.torch.DQN or "
                                                r"marl_note.agents.tf.DQN"):
        DQN(image, ACT, hidden_sizes=(8,), seed=0)
    with pytest.raises(NumpyBackendError, match="user-supplied torso .*marl_note.agents.torch.DQN"):
        DQN(OBS, ACT, torso=user_torso, seed=0)
    with pytest.raises(NumpyBackendError, match="runs on the CPU, got device='cuda'"):
        DQN(OBS, ACT, device="cuda", seed=0)
    assert isinstance(NumpyBackendError("x"), ValueError)


def test_a_non_finite_step_is_refused_before_any_weight_is_written():
    agent = DQN(OBS, ACT, hidden_sizes=(8,), seed=0)
    before = agent.state_dict()
    rng = np.random.default_rng(7)
    with pytest.raises(NonFiniteError, match="DQN update 1: loss is nan"):
        agent.learn(batch(8, rng, rew=np.full(8, np.nan, np.float32)))
    assert_same_state(agent, type(agent)(OBS, ACT, hidden_sizes=(8,), seed=0), atol=0)
    assert all(np.array_equal(v, agent.state_dict()[k]) for k, v in before.items())


# --------------------------------------------------------------------------- no framework anywhere

NO_FRAMEWORK = textwrap.dedent("""
    import sys, tempfile, os
    import numpy as np, gymnasium as gym
    from marl_note.agents.registry import get
    from marl_note.trainers import DecentralizedTrainer
    DQN = get("dqn").cls("numpy")
    env = lambda: gym.make("CartPole-v1")
    trainer = DecentralizedTrainer(env, num_train_envs=2, num_test_envs=1, episodes_per_train=4,
                                   episodes_per_test=1, test_freq=4, seed=0)
    agent = DQN(trainer.spec.observation_space("agent_0"), trainer.spec.action_space("agent_0"),
                hidden_sizes=(16,), learning_starts=16, seed=0)
    trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert agent.updates > 0, agent.updates
    with tempfile.TemporaryDirectory() as d:
        again = type(agent).restore(agent.save(os.path.join(d, "ck")))
    assert again.updates == agent.updates
    loaded = sorted(m for m in ("torch", "tensorflow", "keras", "jax") if m in sys.modules)
    print("frameworks:", loaded)
""")


def test_a_numpy_backend_run_imports_no_framework():
    """Training, saving and restoring a numpy DQN through the trainer, in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", NO_FRAMEWORK], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "frameworks: []" in out.stdout, out.stdout


CLI_RUN = textwrap.dedent("""
    import sys
    from marl_note.cli import main
    out = sys.argv[1]
    assert main(['train', '--env', 'CartPole-v1', '--algo', 'dqn', '--backend', 'numpy', '--env-steps', '600',
                 '--num-envs', '2', '--quiet', '--out', out]) == 0
    assert main(['evaluate', '--checkpoint', out, '--episodes', '2', '--num-envs', '1']) == 0
    assert main(['train', '--env', 'tictactoe_v3', '--algo', 'alphazero', '--backend', 'numpy', '--quiet',
                 '--out', out + '-alphazero']) == 2
    loaded = sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules)
    print("frameworks:", loaded)
""")


def test_the_command_line_trains_and_evaluates_with_the_numpy_backend(tmp_path):
    """``--backend numpy`` trains, records the backend, evaluates, and imports no framework; an algorithm
    without a numpy class is refused naming the backends it has."""
    out = str(tmp_path / "run")
    proc = subprocess.run([sys.executable, "-c", CLI_RUN, out], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "frameworks: []" in proc.stdout, proc.stdout
    assert "--backend numpy has no alphazero yet; alphazero runs with --backend torch or tf" in proc.stderr
    assert json.load(open(os.path.join(out, "marl_note_run.json")))["backend"] == "numpy"


# --------------------------------------------------------------------------- PPO

PPO_OPTIONS = {
    "default": {}, "shared": dict(shared=True), "entropy": dict(ent_coef=0.05),
    "clipping active": dict(clip_range=0.05, lr=3e-3), "unclipped gradients": dict(max_grad_norm=None),
    "prioritized": dict(prioritized=True), "no advantage normalisation": dict(normalize_advantage=False),
}


@pytest.mark.parametrize("space", [gym.spaces.Discrete(5), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)],
                         ids=["categorical", "gaussian"])
@pytest.mark.parametrize("options", list(PPO_OPTIONS.values()), ids=list(PPO_OPTIONS))
def test_ppo_updates_give_torchs_weights(space, options):
    """The same seed and rollout (masks for the categorical policy; GAE, minibatches and epochs from
    the core) give torch's weights, log-std and Adam moments after every minibatch step, to 1e-5."""
    tppo = pytest.importorskip("marl_note.agents.torch").PPO
    from marl_note.agents.numpy import PPO

    ours, theirs = (cls(OBS, space, hidden_sizes=(64, 64), seed=3, n_steps=32, n_epochs=2, **options)
                    for cls in (PPO, tppo))
    rng = np.random.default_rng(1)
    for _ in range(16):
        obs = rng.normal(size=(2, 4)).astype(np.float32)
        mask = None
        if isinstance(space, gym.spaces.Discrete):
            mask = rng.random((2, space.n)) < 0.7
            mask[:, 0] = True
        act = ours.act(obs, mask=mask, explore=True)
        np.testing.assert_allclose(theirs.act(obs, mask=mask, explore=True), act, atol=1e-5)
        t = Transitions(obs=obs, act=act, rew=rng.normal(size=2).astype(np.float32),
                        next_obs=rng.normal(size=(2, 4)).astype(np.float32), terminated=rng.random(2) < 0.1,
                        truncated=np.zeros(2, bool), stream=np.arange(2), mask=mask)
        ours.observe(t)
        theirs.observe(t)
    mine, torchs = ours.update(16), theirs.update(16)
    assert mine["gradient_steps"] == torchs["gradient_steps"] == 4
    assert mine == pytest.approx(torchs, rel=1e-4, abs=1e-6)
    assert_same_state(ours, theirs)


def test_ppo_loss_gradient_matches_finite_differences():
    """The clipped surrogate (some ratios clipped), value and entropy terms of a Gaussian and a masked
    categorical policy, through a shared trunk, in float64."""
    from marl_note.agents.numpy import PPO
    from marl_note.agents.numpy.ppo import ActorCritic

    rng = np.random.default_rng(8)
    for space in (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(4)):
        agent = PPO(OBS, space, hidden_sizes=(5,), shared=True, ent_coef=0.1, clip_range=0.1, seed=0)
        nets = agent.nets
        params = float64(nets.modules["net"])
        nets.net = ActorCritic(params, "tanh", shared=True)
        n = 6
        x = rng.normal(size=(n, 4))
        mask = rng.random((n, 4)) < 0.7
        mask[:, 1] = True
        act = rng.normal(size=(n, 2)) if isinstance(space, gym.spaces.Box) else np.ones(n, np.int64)
        nets._act = lambda a: a  # keep float64 actions
        logp, _ = nets.evaluate(x, act, mask)
        old = logp + rng.normal(size=n) * 0.2  # ratios inside and outside the clip range
        args = (x, act, mask, old, rng.normal(size=n), rng.normal(size=n), rng.random(n) + 0.5)

        def loss(nets=nets, args=args):
            return nets._losses(*args)[0]

        grads = nets._losses(*args)[2]
        for key, arr in params.items():
            np.testing.assert_allclose(grads[key], numeric_grad(loss, arr), rtol=1e-5, atol=1e-7, err_msg=key)


# --------------------------------------------------------------------------- SAC

SAC_OPTIONS = {"default": {}, "fixed temperature": dict(autotune=False), "clipped": dict(max_grad_norm=0.1),
               "prioritized": dict(prioritized=True), "n-step": dict(num_steps=2)}


@pytest.mark.parametrize("space", [gym.spaces.Discrete(5), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)],
                         ids=["discrete", "continuous"])
@pytest.mark.parametrize("options", list(SAC_OPTIONS.values()), ids=list(SAC_OPTIONS))
def test_sac_updates_give_torchs_weights(space, options):
    """Twin critics, actor, tuned temperature and Polyak targets: the same seed and stored data give
    torch's weights, log_alpha and Adam moments after eight to ten gradient steps, to 1e-5."""
    tsac = pytest.importorskip("marl_note.agents.torch").SAC
    from marl_note.agents.numpy import SAC

    common = dict(hidden_sizes=(64, 64), seed=3, learning_starts=16, update_steps=2, **options)
    ours, theirs = SAC(OBS, space, **common), tsac(OBS, space, **common)
    rng = np.random.default_rng(1)
    for _ in range(6):
        n = 8
        extra = {}
        if isinstance(space, gym.spaces.Discrete):
            mask, next_mask = rng.random((n, 5)) < 0.7, rng.random((n, 5)) < 0.7
            mask[:, 0] = next_mask[:, 1] = True
            act = np.array([rng.choice(np.flatnonzero(m)) for m in mask])
            extra = dict(mask=mask, next_mask=next_mask)
        else:
            act = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
        t = Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32), act=act,
                        rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                        terminated=rng.random(n) < 0.1,
                        truncated=np.zeros(n, bool), stream=np.arange(n), **extra)
        ours.observe(t)
        theirs.observe(t)
        assert ours.update(16) == pytest.approx(theirs.update(16), rel=1e-4, abs=1e-6)
    assert ours.updates == theirs.updates >= 8
    assert_same_state(ours, theirs)


@pytest.mark.parametrize("space", [gym.spaces.Discrete(4), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)],
                         ids=["discrete", "continuous"])
def test_sac_losses_gradients_match_finite_differences(space):
    """The critic loss over both critics and the actor loss (through the critics and the tanh squashing,
    or the expectation over legal actions), in float64."""
    from marl_note.agents.numpy import SAC

    agent = SAC(OBS, space, hidden_sizes=(5,), seed=0, activation="tanh")
    nets = agent.nets
    rng = np.random.default_rng(9)
    params = {}
    for name in ("actor", "qf1", "qf2", "qf1_target", "qf2_target"):
        params[name] = float64(nets.modules[name])
        setattr(nets, name, MLP(params[name], name, "tanh"))
    n = 6
    b = {"obs": rng.normal(size=(n, 4)), "next_obs": rng.normal(size=(n, 4)), "rew": rng.normal(size=n),
         "discount": np.full(n, 0.9), "alive": np.ones(n), "weights": rng.random(n) + 0.5}
    if isinstance(space, gym.spaces.Discrete):
        b["act"] = np.ones(n, np.int64)
        b["aux"] = b["next_aux"] = np.array([[True, True, False, True]] * n)
    else:
        b["act"], b["aux"], b["next_aux"] = rng.uniform(-1, 1, (n, 2)), rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    checks = [("critic", lambda: nets._critic(b, 0.3)[0], nets._critic(b, 0.3)[4], ("qf1", "qf2")),
              ("actor", lambda: nets._actor(b, 0.3)[0], nets._actor(b, 0.3)[2], ("actor",))]
    for what, loss, grads, owners in checks:
        for owner in owners:
            for key, arr in params[owner].items():
                np.testing.assert_allclose(grads[key], numeric_grad(loss, arr), rtol=1e-5, atol=1e-7,
                                           err_msg=f"{what}: {key}")


# --------------------------------------------------------------------------- DDPG

DDPG_OPTIONS = {"default": {}, "action_l2": dict(action_l2=0.5), "target_clip": dict(target_clip=(-0.5, 0.5)),
                "clipped": dict(max_grad_norm=0.05), "prioritized": dict(prioritized=True),
                "n-step": dict(num_steps=2)}


@pytest.mark.parametrize("options", list(DDPG_OPTIONS.values()), ids=list(DDPG_OPTIONS))
def test_ddpg_updates_give_torchs_weights(options):
    """Critic, actor (through the just-updated critic and tanh) and Polyak targets: the same seed and stored
    data give torch's weights and Adam moments after eight to ten gradient steps, to 1e-5."""
    tddpg = pytest.importorskip("marl_note.agents.torch").DDPG
    from marl_note.agents.numpy import DDPG

    space = gym.spaces.Box(np.array([0.0, -2.0], np.float32), np.array([2.0, 2.0], np.float32))
    common = dict(hidden_sizes=(64, 64), seed=3, learning_starts=16, update_steps=2, **options)
    ours, theirs = DDPG(OBS, space, **common), tddpg(OBS, space, **common)
    rng = np.random.default_rng(1)
    for _ in range(6):
        n = 8
        t = Transitions(obs=rng.normal(size=(n, 4)).astype(np.float32),
                        act=rng.uniform([0, -2], [2, 2], (n, 2)).astype(np.float32),
                        rew=rng.normal(size=n).astype(np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
                        terminated=rng.random(n) < 0.1, truncated=np.zeros(n, bool), stream=np.arange(n))
        ours.observe(t)
        theirs.observe(t)
        assert ours.update(16) == pytest.approx(theirs.update(16), rel=1e-4, abs=1e-6)
    assert ours.updates == theirs.updates >= 8
    assert_same_state(ours, theirs)


def test_ddpg_actor_loss_gradient_matches_finite_differences():
    from marl_note.agents.numpy import DDPG

    agent = DDPG(OBS, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), hidden_sizes=(5,), action_l2=0.3, seed=0)
    nets = agent.nets
    params = {name: float64(nets.modules[name]) for name in ("actor", "critic")}
    nets.actor, nets.critic = MLP(params["actor"], "actor", "relu"), MLP(params["critic"], "critic", "relu")
    nets._joined = lambda x, a: np.concatenate([x, a], axis=1)  # keep float64
    x = np.random.default_rng(10).normal(size=(6, 4))
    grads = nets._actor_loss(x.astype(np.float64))[1]
    for key, arr in params["actor"].items():
        np.testing.assert_allclose(grads[key], numeric_grad(lambda: nets._actor_loss(x)[0], arr), rtol=1e-5,
                                   atol=1e-7, err_msg=key)


POOL_RUN = textwrap.dedent("""
    import multiprocessing, os, sys, warnings
    warnings.simplefilter("ignore", DeprecationWarning)
    from marl_note.agents.numpy import DQN
    from marl_note.trainers import DecentralizedTrainer
    from tests.leftovers import Created
    created = Created().start()  # this run's blocks and semaphores, not those of a test beside it
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=4, num_test_envs=2, update_freq=64,
                                   episodes_per_train=12, test_freq=6, episodes_per_test=2, seed=0, actors=2,
                                   sync_every=2)
    agent = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), hidden_sizes=(16,),
                learning_starts=32, seed=0)
    stats = trainer.train([agent], learning_mask=[1], plot=False, progress=False)
    assert agent.updates > 0 and stats["pool"]["actors"] == 2 and min(stats["pool"]["transitions_per_actor"]) > 0
    assert not multiprocessing.active_children(), multiprocessing.active_children()
    assert created.blocks() and created.left() == [], (created.blocks(), created.left())
    print("actor frameworks:", stats["pool"]["actor_frameworks"])
    print("learner frameworks:", sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules))
""")


def test_an_actor_pool_run_with_the_numpy_learner_imports_no_framework_in_any_process():
    """Two actor processes and the numpy learner: the actors report no framework imported, and the
    learner's process has none either (a fresh interpreter); no process or shared memory is left."""
    out = subprocess.run([sys.executable, "-c", POOL_RUN], cwd=ROOT, capture_output=True, text=True, timeout=200,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "actor frameworks: []" in out.stdout and "learner frameworks: []" in out.stdout, out.stdout
