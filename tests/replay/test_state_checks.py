"""Every saveable replay buffer can check a state without loading it (what a checkpoint load does first)."""
import numpy as np
import pytest

from marl_note.envs.goal_envs import PointReachEnv
from marl_note.replay import HERReplayBuffer, JointReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from marl_note.types import JointTransitions
from tests.replay.helpers import ACT_SPACE, OBS_SPACE, make_batch
from tests.replay.test_her import collect


def uniform():
    buf = ReplayBuffer(8, OBS_SPACE, ACT_SPACE, seed=0)
    buf.add(make_batch(5, masks=True))
    return buf


def prioritized():
    buf = PrioritizedReplayBuffer(8, OBS_SPACE, ACT_SPACE, seed=0)
    buf.add(make_batch(5))
    return buf


def her():
    make = lambda: PointReachEnv(max_steps=5)  # noqa: E731
    buf = HERReplayBuffer.from_env(make(), capacity=20, seed=0)
    collect(buf, make, n_envs=2, steps=8)
    return buf


def joint():
    spaces = {"a": OBS_SPACE, "b": OBS_SPACE}
    acts = {"a": ACT_SPACE, "b": ACT_SPACE}
    buf = JointReplayBuffer(8, ("a", "b"), spaces, acts, seed=0)
    n = 4
    obs = {a: np.zeros((n, 3), np.float32) for a in "ab"}
    buf.add(JointTransitions(("a", "b"), obs=obs, act={a: np.zeros(n, np.int64) for a in "ab"},
                             rew=np.ones((n, 2), np.float32), next_obs=obs, terminated=np.zeros((n, 2), bool),
                             truncated=np.zeros((n, 2), bool), alive=np.ones((n, 2), bool)))
    return buf


@pytest.mark.parametrize("make", [uniform, prioritized, her, joint])
@pytest.mark.parametrize("damage,match", [
    (lambda s: s.update(size=np.asarray(float(s["size"]))), r"\['size'\] must be one integer"),
    (lambda s: s.update(ptr=np.asarray([int(s["ptr"])] * 2)), r"\['ptr'\] must be one integer"),
    (lambda s: s.update(rew=s["rew"].astype(np.float64)), "'rew'.*dtype float64"),
    (lambda s: s.update(rng_state=s["rng_state"][:3]), "rng state"),
])
def test_check_state_dict_refuses_what_load_state_dict_refuses_and_changes_nothing(make, damage, match):
    buf = make()
    state = buf.state_dict()
    buf.check_state_dict(state)  # its own state is fine
    damage(state)
    before = {k: v.tobytes() for k, v in buf.state_dict().items()}
    for method in (buf.check_state_dict, buf.load_state_dict):
        with pytest.raises(ValueError, match=match):
            method(state)
        assert {k: v.tobytes() for k, v in buf.state_dict().items()} == before


def test_prioritized_scalars_must_be_numbers():
    buf = prioritized()
    state = buf.state_dict()
    state["per_alpha"] = np.asarray("0.6")
    with pytest.raises(ValueError, match="'per_alpha'.* must be one number"):
        buf.check_state_dict(state)
