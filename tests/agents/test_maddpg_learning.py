"""MADDPG learning: a tiny cooperative ParallelEnv driven by MADDPG's own loop (``observe_joint`` /
``update``), and the trainer integration on MPE simple_spread. The numpy core drives both; the TF
networks compute the same updates (tests/agents/test_maddpg.py parity tests), so torch runs them."""
import gymnasium as gym
import numpy as np
import pytest

from marl_note.types import JointTransitions
from tests.agents.maddpg_helpers import maddpg_class

# --------------------------------------------------------------------------- learning

class MatchCueEnv:
    """Two agents, episodes of 4 steps; each step shows a cue c in {0, 1, 2} (agent_0 as a one-hot,
    agent_1 as a 4-vector with the one-hot shifted by one) and pays both 1 iff both play c."""

    possible_agents = ["agent_0", "agent_1"]
    metadata = {"name": "match_cue"}

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.spaces = {"agent_0": gym.spaces.Box(0, 1, (3,), np.float32),
                       "agent_1": gym.spaces.Box(0, 1, (4,), np.float32)}

    def observation_space(self, agent):
        return self.spaces[agent]

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def _obs(self):
        self.cue = int(self.rng.integers(0, 3))
        o0, o1 = np.zeros(3, np.float32), np.zeros(4, np.float32)
        o0[self.cue], o1[self.cue + 1] = 1, 1
        return {"agent_0": o0, "agent_1": o1}

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        r = float(actions["agent_0"] == actions["agent_1"] == self.cue)
        self.t += 1
        done = self.t >= 4
        return (self._obs(), {a: r for a in self.agents}, {a: False for a in self.agents},
                {a: done for a in self.agents}, {a: {} for a in self.agents})


def run_episodes(m, envs, n_rounds, explore, learn, rng):
    agents = tuple(envs[0].possible_agents)
    obs = [e.reset()[0] for e in envs]
    total = 0.0
    for _ in range(n_rounds):
        acts = {a: m.act_agent(a, np.stack([o[a] for o in obs]), explore=explore) for a in agents}
        rows = [e.step({a: int(acts[a][k]) for a in agents}) for k, e in enumerate(envs)]
        total += sum(r[1]["agent_0"] for r in rows)
        if learn:
            m.observe_joint(JointTransitions(
                agents, obs={a: np.stack([o[a] for o in obs]) for a in agents}, act=acts,
                rew=np.array([[r[1][a] for a in agents] for r in rows], np.float32),
                next_obs={a: np.stack([r[0][a] for r in rows]) for a in agents},
                terminated=np.zeros((len(envs), 2), bool),
                truncated=np.array([[r[3][a] for a in agents] for r in rows]), alive=np.ones((len(envs), 2), bool)))
            m.update(64)
        obs = [e.reset()[0] if r[3]["agent_0"] else r[0] for e, r in zip(envs, rows)]
    return total / (n_rounds * len(envs))


def test_maddpg_learns_to_coordinate_on_the_cue():
    MADDPG = maddpg_class("torch")
    envs = [MatchCueEnv(seed=i) for i in range(8)]
    m = MADDPG({a: envs[0].observation_space(a) for a in envs[0].possible_agents},
               {a: envs[0].action_space(a) for a in envs[0].possible_agents}, hidden_sizes=(32, 32),
               learning_starts=64, replay_ratio=0.25, gamma=0.5, tau=0.05, seed=0)
    rng = np.random.default_rng(0)
    random_rate = run_episodes(m, envs, 40, explore=True, learn=False, rng=rng)
    run_episodes(m, envs, 100, explore=True, learn=True, rng=rng)
    greedy_rate = run_episodes(m, envs, 40, explore=False, learn=False, rng=rng)
    assert random_rate < 0.3  # about 1/9 by chance
    assert greedy_rate > 0.8, (random_rate, greedy_rate)


# --------------------------------------------------------------------------- through the trainer

def test_trainer_delivers_joint_rows_on_simple_spread():
    MADDPG = maddpg_class("torch")
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from marl_note.trainers import DecentralizedTrainer

    trainer = DecentralizedTrainer(lambda: simple_spread_v3.parallel_env(max_cycles=25), num_train_envs=2,
                                   num_test_envs=2, batch_size=32, update_freq=50, test_freq=8,
                                   episodes_per_train=8, episodes_per_test=2, seed=0)
    m = MADDPG.from_trainer(trainer, hidden_sizes=(16,), learning_starts=64, replay_ratio=0.1, seed=0)
    seen = []
    observe_joint = m.observe_joint
    m.observe_joint = lambda jt: (seen.append(jt), observe_joint(jt))
    stats = trainer.train(m.seat_agents(), learning_mask=[1, 1, 1], plot=False, progress=False)
    rows = sum(len(jt) for jt in seen)
    assert rows == len(m.replay) == stats["num_collected_steps"] == 8 * 25  # one row per env step
    assert m.agent_steps == stats["num_collected_agent_steps"] == 3 * rows
    assert all(jt.alive.all() and jt.obs["agent_2"].shape[1:] == (18,) for jt in seen)
    assert sum(int(jt.truncated.all(axis=1).sum()) for jt in seen) == 8  # each episode ends once
    assert m.updates == stats["num_gradient_steps"] > 0  # one update per step, not one per seat
    result = trainer.test(m.seat_agents(), episodes=2)
    assert result["rewards"].shape == (2, 3)
    trainer.close()


def test_a_seat_learner_beside_a_centralised_learner_gets_its_transitions():
    """A learning seat next to MADDPG's seats still receives its own transitions (it used to get none)."""
    MADDPG = maddpg_class("torch")
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from marl_note.trainers import DecentralizedTrainer
    from tests.trainers.test_trainer import CountingLearner

    trainer = DecentralizedTrainer(lambda: simple_spread_v3.parallel_env(max_cycles=25), num_train_envs=2,
                                   num_test_envs=1, batch_size=32, update_freq=50, test_freq=4,
                                   episodes_per_train=4, episodes_per_test=1, seed=0)
    m = MADDPG.from_trainer(trainer, hidden_sizes=(8,), learning_starts=10_000, seed=0)
    seats = m.seat_agents()
    solo = CountingLearner(trainer.action_space("agent_2"), trainer.observation_space("agent_2"))
    stats = trainer.train([seats[0], seats[1], solo], learning_mask=[1, 1, 1], plot=False, progress=False)
    assert len(m.replay) == stats["num_collected_steps"] == 4 * 25  # the joint rows, as before
    assert solo.stored == stats["num_collected_steps"]  # one transition of agent_2 per env step
    assert solo.update_calls > 0
    trainer.close()
