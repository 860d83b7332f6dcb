"""animate_agent: one frame per env step (and one of the reset state), GIF or MP4, clear errors."""
import os
import shutil
import sys

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3
from PIL import Image

from marl_note.agents import RandomAgent
from marl_note.compat.animate import animate_agent
from tests.scripted_envs import NimEnv


def gif_frames(path):
    """Every frame of a GIF, as RGB arrays."""
    with Image.open(path) as im:
        assert im.format == "GIF"
        out = []
        for k in range(im.n_frames):
            im.seek(k)
            out.append(np.asarray(im.convert("RGB")))
        return out


def test_cartpole_gif_has_a_frame_per_step(tmp_path):
    agent = RandomAgent(gym.spaces.Discrete(2), seed=0)
    out = animate_agent("CartPole-v1", [agent], path=str(tmp_path / "cartpole.gif"), seed=0)
    assert 8 <= out.steps < 500  # a random CartPole episode ends on its own
    assert out.frames == out.steps + 1 == len(gif_frames(out.path))
    short = animate_agent("CartPole-v1", agent, max_steps=3, path=str(tmp_path / "short.gif"), fps=10, seed=0)
    frames = gif_frames(short.path)
    assert short.steps == 3 and short.frames == len(frames) == 4 and frames[0].shape == (400, 600, 3)


def test_a_turn_based_game_shows_every_move_of_both_seats(tmp_path):
    env = tictactoe_v3.env(render_mode="rgb_array")
    players = {"player_1": RandomAgent(gym.spaces.Discrete(9), seed=1),
               "player_2": RandomAgent(gym.spaces.Discrete(9), seed=2)}
    out = animate_agent(env, players, path=str(tmp_path / "ttt.gif"), seed=0)
    frames = gif_frames(out.path)
    assert 5 <= out.steps <= 9 and out.frames == out.steps + 1 == len(frames)
    # each move draws one mark: every frame differs from the one before it
    assert all(not np.array_equal(a, b) for a, b in zip(frames, frames[1:]))
    env.close()


class StillEnv(gym.Env):
    """An env whose picture never changes: Pillow would merge its frames into one."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}
    observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 0.0, self.t >= 4, False, {}

    def render(self):
        frame = np.zeros((8, 8, 3), np.uint8)
        frame[2:5, 2:5] = (200, 30, 30)
        return frame


def test_identical_frames_are_kept_as_frames_of_their_own(tmp_path):
    out = animate_agent(StillEnv, RandomAgent(gym.spaces.Discrete(2), seed=0), path=str(tmp_path / "still.gif"))
    frames = gif_frames(out.path)
    assert out.steps == 4 and out.frames == len(frames) == 5
    assert all(np.abs(f.astype(int) - frames[0]).max() <= 1 for f in frames)  # the nudge is invisible


def test_bad_input_is_refused_before_anything_is_played_or_written(tmp_path, monkeypatch):
    agent = RandomAgent(gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ValueError, match=r"writes \.gif or \.mp4 files; got path .*\.avi"):
        animate_agent("CartPole-v1", agent, path=str(tmp_path / "a.avi"))
    for steps in (0, -1, 2.5):
        with pytest.raises(ValueError, match="max_steps must be a positive integer"):
            animate_agent("CartPole-v1", agent, max_steps=steps, path=str(tmp_path / "a.gif"))
    with pytest.raises(ValueError, match="fps must be"):
        animate_agent("CartPole-v1", agent, fps=0, path=str(tmp_path / "a.gif"))
    with pytest.raises(ValueError, match=r"'nim_v0' cannot render frames: its render modes are \[\]"):
        animate_agent(NimEnv, [agent, agent], path=str(tmp_path / "a.gif"))
    plain = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match="render_mode=None; animate_agent needs render_mode='rgb_array'"):
        animate_agent(plain, agent, path=str(tmp_path / "a.gif"))
    with pytest.raises(ValueError, match="expected 2 agents|2 seats"):
        animate_agent(tictactoe_v3, [RandomAgent(gym.spaces.Discrete(9))], path=str(tmp_path / "a.gif"))
    with pytest.raises(ValueError, match="unknown Gymnasium env id"):
        animate_agent("NoSuchEnv-v0", agent, path=str(tmp_path / "a.gif"))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # not installed
    with pytest.raises(RuntimeError, match="needs the ffmpeg program.*pip install imageio-ffmpeg"):
        animate_agent("CartPole-v1", agent, path=str(tmp_path / "a.mp4"))
    assert os.listdir(tmp_path) == []


def _ffmpeg():
    from marl_note.compat.animate import _find_ffmpeg
    try:
        return _find_ffmpeg()
    except RuntimeError:
        return None


@pytest.mark.skipif(_ffmpeg() is None, reason="needs ffmpeg (on the PATH, or pip install imageio-ffmpeg)")
def test_mp4_has_a_frame_per_step(tmp_path):
    import re
    import subprocess
    out = animate_agent("CartPole-v1", RandomAgent(gym.spaces.Discrete(2), seed=0), max_steps=6,
                        path=str(tmp_path / "cartpole.mp4"), seed=0)
    decoded = subprocess.run([_ffmpeg(), "-i", out.path, "-map", "0:v:0", "-f", "null", "-"], capture_output=True,
                             text=True)
    assert out.frames == 7 and re.findall(r"frame=\s*(\d+)", decoded.stderr)[-1] == "7"
    assert os.listdir(tmp_path) == ["cartpole.mp4"]  # no temporary file left
