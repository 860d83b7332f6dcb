"""MADDPG in the numpy backend: its losses' gradients against finite differences, one-update parity with
torch for each option (Gumbel-softmax and Box actors, masks, local critics, clipping, one agent trained),
updates from its own replay, checkpoints numpy -> torch -> TF -> numpy, and a run without a framework.

The backend-independent MADDPG behaviour (masks, noise, saving, seats) runs for numpy too: ``numpy`` is
in ``tests.agents.maddpg_helpers.BACKENDS``."""
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from marl_note.agents.numpy import MADDPG
from marl_note.agents.numpy.layers import MLP
from tests.agents.maddpg_helpers import joint_batch
from tests.agents.test_maddpg_masks import ACT as MASKED_ACT
from tests.agents.test_maddpg_masks import OBS as MASKED_OBS
from tests.agents.test_maddpg_masks import masked_batch
from tests.agents.test_numpy_backend import ROOT, assert_same_state, numeric_grad

# a Discrete agent (Gumbel-softmax actor) and a Box agent (tanh actor) with an asymmetric range
OBS = {"a": gym.spaces.Box(-1, 1, (4,), np.float32), "b": gym.spaces.Box(-1, 1, (3,), np.float32)}
ACT = {"a": gym.spaces.Discrete(3, start=1),
       "b": gym.spaces.Box(np.array([0.0, -2.0], np.float32), np.array([2.0, 2.0], np.float32))}

OPTIONS = {"default": {}, "local critics": dict(centralized_critic=False), "action_reg": dict(action_reg=0.5),
           "clipped": dict(max_grad_norm=0.05), "tanh": dict(activation="tanh"), "polyak": dict(tau=0.5),
           "gamma": dict(gamma=0.5), "temperature": dict(temperature=0.3)}


def torch_maddpg():
    return pytest.importorskip("marl_note.agents.torch").MADDPG


@pytest.mark.parametrize("masked", [False, True], ids=["box+discrete", "masked discrete"])
@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_one_update_gives_torchs_weights(options, masked):
    """From identical weights and batches (absent agents, terminations, Gumbel noise from the same
    generator, legal-action masks), each update gives torch's weights, targets, Adam moments and metrics
    to 1e-5. The learning rates are the torch/TF parity test's 1e-3: Adam's first step maps a gradient g to
    lr * g / (|g| + 1e-8), so a gradient that is rounding noise around zero (a unit reached only through
    near-one-hot softmax rows) differs by up to ~lr * 1e-3 between any two float32 implementations."""
    spaces, make = ((MASKED_OBS, MASKED_ACT), lambda rng: masked_batch(32, rng)) if masked else \
        ((OBS, ACT), lambda rng: joint_batch(32, rng, OBS, ACT))
    cfg = dict(hidden_sizes=(64, 64), learning_starts=0, actor_lr=1e-3, critic_lr=1e-3, seed=3, **options)
    ours, theirs = MADDPG(*spaces, **cfg), torch_maddpg()(*spaces, **cfg)
    assert_same_state(ours, theirs, atol=0)
    rng = np.random.default_rng(1)
    for step in range(3):
        b = make(rng)
        agents = ["b"] if step == 2 else None  # the last update trains one agent (and moves its targets only)
        mine, torchs = ours.learn(b, agents=agents), theirs.learn(b, agents=agents)
        assert_same_state(ours, theirs, skip=())
        assert mine.keys() == torchs.keys()
        for k in mine:
            assert mine[k] == pytest.approx(torchs[k], rel=1e-5, abs=1e-6), k
    p = ours.prepare_batch(make(rng), np.random.default_rng(0))  # the target actions the critics see
    for x, y in zip(ours.nets.target_actions(p), theirs.nets.target_actions(p), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-6)
    assert ours.nets.grad_sq_norm(p) == pytest.approx(theirs.nets.grad_sq_norm(p), rel=1e-4)


def test_updates_from_the_agents_own_replay_match_torch():
    """The schedule end to end: the same stored rows and seed sample the same batches and Gumbel noise."""
    cfg = dict(hidden_sizes=(32, 32), learning_starts=16, update_steps=2, actor_lr=1e-3, critic_lr=1e-3, seed=5)
    ours, theirs = MADDPG(OBS, ACT, **cfg), torch_maddpg()(OBS, ACT, **cfg)
    rng = np.random.default_rng(2)
    for _ in range(5):
        rows = joint_batch(8, rng, OBS, ACT)
        ours.observe_joint(rows)
        theirs.observe_joint(rows)
        assert ours.update(16) == pytest.approx(theirs.update(16), rel=1e-5, abs=1e-6)
    assert ours.updates == theirs.updates >= 6
    assert_same_state(ours, theirs, skip=())


def float64_nets(m):
    """``m``'s networks rebuilt over float64 copies of its actor and critic arrays (for finite differences)."""
    params = {}
    for a in m.agents:
        for net, nets in (("actor", m.nets.actor), ("critic", m.nets.critic)):
            params[f"{a}.{net}"] = {k: v.astype(np.float64) for k, v in m.nets.modules[f"{a}.{net}"].items()}
            nets[a] = MLP(params[f"{a}.{net}"], f"{a}.{net}", m.cfg.activation)
    return params


@pytest.mark.parametrize("masked", [False, True], ids=["box+discrete", "masked discrete"])
def test_losses_gradients_match_finite_differences(masked, monkeypatch):
    """Each agent's critic loss over its critic, and its actor loss (straight-through Gumbel-softmax with
    masks, or tanh) through the critic over its actor, against central differences in float64. The
    straight-through sample is differenced as torch's surrogate: ``hard0 - soft0 + soft(theta)`` with the
    one-hot ``hard0`` and ``soft0`` of the unperturbed weights held fixed."""
    from marl_note.agents.numpy import maddpg as numpy_maddpg

    held: dict = {}

    def surrogate(soft):
        if "soft0" not in held:
            held["soft0"], held["hard0"] = soft.copy(), numpy_maddpg._one_hot(soft.argmax(1), soft.shape[1], soft.dtype)
        return (held["hard0"] - held["soft0"]) + soft

    monkeypatch.setattr(numpy_maddpg, "straight_through", surrogate)
    spaces, batch = ((MASKED_OBS, MASKED_ACT), masked_batch(6, np.random.default_rng(4))) if masked else \
        ((OBS, ACT), joint_batch(6, np.random.default_rng(4), OBS, ACT))
    m = MADDPG(*spaces, hidden_sizes=(5,), action_reg=0.3, activation="tanh", seed=0)
    params = float64_nets(m)
    p = {k: [x.astype(np.float64) for x in v] if isinstance(v, list) else np.asarray(v, np.float64)
         for k, v in m.prepare_batch(batch, np.random.default_rng(1)).items()}
    p["temperature"] = [np.float64(0.7)] * len(m.agents)  # a softer relaxation: larger relaxed gradients
    m.nets._arrays = lambda batch: batch  # keep float64
    next_acts = m.nets._target_actions(p["next_obs"], p["next_mask"], p["next_live"])
    for i, a in enumerate(m.agents):
        held.clear()
        critic = m.nets._critic_loss(a, i, p, next_acts)[2]
        actor = m.nets._actor_loss(a, i, p)[1]
        for grads, net, loss in ((critic, "critic", lambda a=a, i=i: m.nets._critic_loss(a, i, p, next_acts)[0]),
                                 (actor, "actor", lambda a=a, i=i: m.nets._actor_loss(a, i, p)[0])):
            for key, arr in params[f"{a}.{net}"].items():
                np.testing.assert_allclose(grads[key], numeric_grad(loss, arr), rtol=1e-5, atol=1e-7, err_msg=key)


def test_checkpoint_round_trip_numpy_torch_tf_numpy(tmp_path):
    """A numpy-trained MADDPG restores in torch, torch's checkpoint in TF, TF's back in numpy: the same state
    each time (weights, targets, Adam moments, exploration), and one more update agrees with torch's."""
    TorchMADDPG = torch_maddpg()
    pytest.importorskip("tensorflow")
    from marl_note.agents.tf import MADDPG as TFMADDPG

    m = MADDPG(OBS, ACT, hidden_sizes=(16,), learning_starts=8, seed=0)
    rng = np.random.default_rng(6)
    m.observe_joint(joint_batch(32, rng, OBS, ACT))
    assert m.update(8)["gradient_steps"] > 0
    in_torch = TorchMADDPG.restore(m.save(str(tmp_path / "numpy")))
    assert_same_state(in_torch, m, atol=0, skip=())
    in_tf = TFMADDPG.restore(in_torch.save(str(tmp_path / "torch")))
    assert_same_state(in_tf, m, atol=0, skip=())
    back = MADDPG.restore(in_tf.save(str(tmp_path / "tf")))
    assert type(back) is MADDPG
    assert_same_state(back, m, atol=0, skip=())
    b = joint_batch(16, rng, OBS, ACT)
    back.learn(b)
    in_torch.learn(b)
    assert_same_state(back, in_torch, skip=())


NO_FRAMEWORK_RUN = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore", DeprecationWarning)
    from mpe2 import simple_spread_v3
    from marl_note.agents import registry
    from marl_note.trainers import DecentralizedTrainer
    MADDPG = registry.get("maddpg").cls("numpy")
    trainer = DecentralizedTrainer(lambda: simple_spread_v3.parallel_env(N=2, max_cycles=10, continuous_actions=True),
                                   num_train_envs=2, num_test_envs=1, batch_size=16, update_freq=20,
                                   episodes_per_train=4, test_freq=2, episodes_per_test=1, seed=0)
    m = MADDPG.from_trainer(trainer, hidden_sizes=(16,), learning_starts=16, update_steps=1, seed=0)
    trainer.train(m.seat_agents(), learning_mask=[1, 1], plot=False, progress=False)
    assert m.updates > 0, m.updates
    print("frameworks:", sorted(x for x in ("torch", "tensorflow", "keras") if x in sys.modules))
""")


def test_a_numpy_maddpg_run_imports_no_framework():
    """MADDPG trained on a PettingZoo Parallel env through the registry's numpy class, in a fresh
    interpreter: it learns (updates > 0) and neither torch nor TF is imported."""
    pytest.importorskip("mpe2")
    out = subprocess.run([sys.executable, "-c", NO_FRAMEWORK_RUN], cwd=ROOT, capture_output=True, text=True,
                         timeout=200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "frameworks: []" in out.stdout, out.stdout
