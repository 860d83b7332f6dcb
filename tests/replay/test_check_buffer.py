"""check_buffer (issue 29, item 6): every buffer class of marl_note.replay passes it, and it catches buffers
that break their contract (small broken subclasses defined here)."""
import inspect

import gymnasium as gym
import numpy as np
import pytest

import marl_note.replay as replay
from marl_note.envs.goal_envs import BitFlippingEnv
from marl_note.replay import (
    CompactReplayBuffer,
    HERReplayBuffer,
    JointReplayBuffer,
    NStepAccumulator,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    ReplayFeed,
    RolloutBuffer,
    TripletReplayBuffer,
)
from marl_note.replay.checks import BufferCheckError, check_buffer
from marl_note.types import Transitions

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (4, 4, 2), np.uint8)
DISCRETE = gym.spaces.Discrete(4)
BOX_ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)

BUFFERS = {
    "ReplayBuffer": lambda: ReplayBuffer(40, BOX, DISCRETE),
    "ReplayBuffer images, Box actions": lambda: ReplayBuffer(40, IMAGE, BOX_ACT),
    "ReplayBuffer MultiDiscrete": lambda: ReplayBuffer(40, gym.spaces.MultiBinary(5), gym.spaces.MultiDiscrete([2, 3])),
    "CompactReplayBuffer": lambda: CompactReplayBuffer(40, IMAGE, DISCRETE),
    "PrioritizedReplayBuffer": lambda: PrioritizedReplayBuffer(40, BOX, DISCRETE),
    "PrioritizedReplayBuffer compact": lambda: PrioritizedReplayBuffer(40, IMAGE, BOX_ACT, optimize_memory=True),
    "HERReplayBuffer": lambda: HERReplayBuffer.from_env(BitFlippingEnv(n_bits=3), 40),
    "TripletReplayBuffer": lambda: TripletReplayBuffer(40, BOX, DISCRETE),
    "JointReplayBuffer": lambda: JointReplayBuffer(40, ("a", "b"), {"a": BOX, "b": IMAGE},
                                                   {"a": DISCRETE, "b": BOX_ACT}),
    "RolloutBuffer": lambda: RolloutBuffer(BOX, DISCRETE),
    "ReservoirBuffer": lambda: replay.ReservoirBuffer(30, 3, 4, seed=0),
    "ReplayFeed n-step": lambda: ReplayFeed(BOX, DISCRETE, buffer_size=200, gamma=0.9, num_steps=3),
    "ReplayFeed n-step prioritized": lambda: ReplayFeed(BOX, BOX_ACT, buffer_size=200, gamma=0.5, num_steps=2,
                                                        prioritized=True) if _lowercase_feed() else
    ReplayFeed(BOX, BOX_ACT, buffer_size=200, gamma=0.5, num_steps=2, PR=True),
    "ReplayFeed n-step compact": lambda: ReplayFeed(IMAGE, DISCRETE, buffer_size=200, gamma=0.99, num_steps=4,
                                                    optimize_memory=True),
}
# classes of marl_note.replay that add and read items but are parts of the buffers above, checked through them
PARTS = {replay.SumTree: "the sampler inside PrioritizedReplayBuffer",
         NStepAccumulator: "the accumulator inside ReplayFeed (its n-step returns are checked through the feed)",
         replay.RingStorage: "the storage inside ReplayBuffer"}


def _lowercase_feed():
    """Whether ReplayFeed takes the lowercase ``prioritized=`` (the capitalised ``PR=`` is being renamed)."""
    return "prioritized" in inspect.signature(ReplayFeed).parameters


def test_every_buffer_class_of_the_replay_package_is_checked():
    public = {getattr(replay, n) for n in replay.__all__ if inspect.isclass(getattr(replay, n))}
    buffers = {c for c in public if callable(getattr(c, "add", None))
               and any(callable(getattr(c, m, None)) for m in ("sample", "get", "write"))}
    covered = {type(make()) for make in BUFFERS.values()}
    assert buffers - set(PARTS) <= covered, sorted(c.__name__ for c in buffers - set(PARTS) - covered)


@pytest.mark.parametrize("name", BUFFERS)
def test_every_buffer_passes(name):
    buffer = BUFFERS[name]()
    before = {k: np.array(v, copy=True) for k, v in buffer.state_dict().items()} if hasattr(buffer, "state_dict") \
        else None
    report = check_buffer(buffer)
    assert len(buffer) == 0  # the checks ran on copies
    if before is not None:
        assert all(np.array_equal(v, buffer.state_dict()[k]) for k, v in before.items())
    expected = {"RolloutBuffer": ["add", "arrival order and extras", "chunks of another form refused", "clear"]}.get(
        type(buffer).__name__, ["add", "wrap-around", "sample", "garbage state refused, nothing changed",
                                "state_dict round trip"])
    assert set(expected) <= set(report.checks), report.checks
    if "prioritized" in name or "Prioritized" in name:
        assert "prioritized weights" in report.checks
    if name.startswith("ReplayFeed"):
        assert report.checks[0] == "n-step returns cut at episode ends"


def batch(n=1):
    return Transitions(obs=np.zeros((n, 3), np.float32), act=np.zeros(n, np.int64), rew=np.zeros(n, np.float32),
                       next_obs=np.zeros((n, 3), np.float32), terminated=np.zeros(n, bool), truncated=np.zeros(n, bool))


class OverwritesTheFront(ReplayBuffer):
    """Once full, writes every batch at the front of the ring (over the same few rows), not over the oldest."""

    def add(self, transitions):
        if len(self) == self.capacity:
            self._storage._ptr = 0
        return super().add(transitions)


class ForgetsItsGenerator(ReplayBuffer):
    def state_dict(self):
        return {k: v for k, v in super().state_dict().items() if k != "rng_state"}

    def load_state_dict(self, state):
        super().load_state_dict({**state, "rng_state": super().state_dict()["rng_state"]})

    def check_state_dict(self, state):
        super().check_state_dict({**state, "rng_state": super().state_dict()["rng_state"]})


class ShuffledRows(ReplayBuffer):
    """Samples observations of other rows than the rest of the transition."""

    def sample(self, batch_size):
        out = super().sample(batch_size)
        out.obs = out.obs[::-1].copy()
        return out


class AcceptsAnything(ReplayBuffer):
    def load_state_dict(self, state):
        try:
            super().load_state_dict(state)
        except ValueError:
            pass

    def check_state_dict(self, state):
        pass


class LoadsHalfThenFails(ReplayBuffer):
    """A load that changes the buffer before it refuses the state."""

    def load_state_dict(self, state):
        self._rng = np.random.default_rng(123)
        super().load_state_dict(state)


class UnnormalisedWeights(PrioritizedReplayBuffer):
    def sample(self, batch_size):
        out = super().sample(batch_size)
        out.weights = out.weights * 2
        return out


class NoCut(NStepAccumulator):
    """Runs its windows across truncated episode ends (it is not told of them)."""

    def add(self, transitions):
        return super().add(Transitions(**{**vars(transitions), "truncated": np.zeros(len(transitions), bool)}))


class Reversed(RolloutBuffer):
    def get(self):
        return super().get()[::-1]


class StoresUnfinishedEpisodes(TripletReplayBuffer):
    """Stores every transition at once, as if each ended its episode."""

    def add(self, transitions):
        ended = Transitions(**{**vars(transitions), "truncated": np.ones(len(transitions), bool)})
        super().add(ended)


def feed_without_cuts():
    feed = ReplayFeed(BOX, DISCRETE, buffer_size=200, gamma=0.9, num_steps=3)
    feed.nstep = NoCut(3, 0.9)
    return feed


@pytest.mark.parametrize("make, message", [
    (lambda: OverwritesTheFront(40, BOX, DISCRETE),
     r"check_buffer\(OverwritesTheFront\): after \d+ adds to capacity 40 it holds items \[\d+, \d+, \d+, \d+\]\.\.\.; "
     r"expected the newest 40"),
    (lambda: ForgetsItsGenerator(40, BOX, DISCRETE), r"a buffer restored from state_dict\(\) samples another obs than "
                                                     r"the saved one \(is its generator missing from the state\?\)"),
    # (the first row whose obs is not its own: row 0 holds row 15's obs, the same item when both drew it)
    (lambda: ShuffledRows(40, BOX, DISCRETE, seed=0),
     r"sample\(16\): row \d+ \(item \d+\) has obs .*, but the item added had"),
    (lambda: AcceptsAnything(40, BOX, DISCRETE), r"check_state_dict accepted a state with an empty dict"),
    (lambda: LoadsHalfThenFails(40, BOX, DISCRETE), r"a refused load_state_dict \(state with an empty dict\) changed "
                                                    r"the buffer: state_dict\['rng_state'\] differs"),
    (lambda: UnnormalisedWeights(40, BOX, DISCRETE),
     r"sample\(16\) importance weights must be float32, one per row, in \(0, 1\] with the largest 1"),
    (feed_without_cuts, r"check_buffer\(ReplayFeed\): an n-step window of \d steps from item \d+ runs across an "
                        r"episode end"),
    (lambda: Reversed(BOX, DISCRETE), r"get\(\) must return every transition in arrival order"),
    (lambda: StoresUnfinishedEpisodes(40, BOX, DISCRETE), r"after \d+ adds \(\d+ in finished episodes\) len\(\) is \d+ "
                                                          r"and num_pending 0"),
])
def test_check_buffer_catches_a_buffer_that_breaks_its_contract(make, message):
    with pytest.raises(BufferCheckError, match=message):
        check_buffer(make())


def test_what_check_buffer_cannot_check_is_refused():
    full = ReplayBuffer(40, BOX, DISCRETE)
    full.add(batch(2))
    with pytest.raises(BufferCheckError, match=r"check_buffer\(ReplayBuffer\): the buffer holds 2 items; pass an "):
        check_buffer(full)
    with pytest.raises(BufferCheckError, match=r"capacity 100000 is more than the checks fill"):
        check_buffer(ReplayBuffer(100_000, BOX, DISCRETE))
    with pytest.raises(BufferCheckError, match=r"check_buffer\(dict\): not a buffer it knows"):
        check_buffer({})
