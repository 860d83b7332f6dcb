"""Play one greedy episode of some agents and write it as a GIF or an MP4 (the original ``animate_agent``).

The env is made with ``render_mode="rgb_array"`` and adapted as the trainer adapts it (a
Gymnasium id, a PettingZoo env module or factory, or an env instance made with that render
mode). Frames: one of the reset state, then one after every env step, so a file holds
``steps + 1`` frames; in a turn-based game every move of every seat is a step of its own.

GIF (Pillow): Pillow merges a frame identical to the one before it into a single longer frame;
here such a frame has one palette colour nudged by one level of blue (invisible), so every step
keeps a frame of its own and the frame count stays ``steps + 1``. Frames are held in memory as
8-bit palette images until the file is written (one byte per pixel: 240 KB a CartPole frame).
Viewers show GIF frames for at least 20 ms, so more than 50 ``fps`` plays slower than asked.

MP4: frames are streamed to the ``ffmpeg`` program (found on the PATH, or the one the optional
``imageio-ffmpeg`` package ships); without it, a RuntimeError says what to install.

Both are written atomically (a temporary file beside the target, renamed over it).

Example:
    >>> import os, tempfile
    >>> from marl_note.agents import RandomAgent
    >>> import gymnasium as gym
    >>> agent = RandomAgent(gym.spaces.Discrete(2), seed=0)
    >>> out = animate_agent("CartPole-v1", agent, max_steps=5, path=os.path.join(tempfile.mkdtemp(), "cartpole.gif"),
    ...                     seed=0)
    >>> out.steps, out.frames
    (5, 6)
"""
from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, cast

import gymnasium as gym
import numpy as np

from marl_note.atomic_files import create_temp, fsync_dir, keep_mode, remove_quietly, write_atomically
from marl_note.envs.adapters import adapt, make_spec
from marl_note.trainers.collector import check_actions
from marl_note.trainers.seats import accepts_env_ids, check_seats
from marl_note.types import stack_obs

try:
    from pettingzoo import AECEnv, ParallelEnv
except ImportError:  # pragma: no cover
    AECEnv = ParallelEnv = ()

FORMATS = (".gif", ".mp4")


class Animation(NamedTuple):
    """What :func:`animate_agent` wrote: the file's absolute path, its frames and the env steps played.

    Example:
        >>> Animation("/tmp/a.gif", frames=6, steps=5).frames
        6
    """

    path: str
    frames: int
    steps: int


def animate_agent(env: Any, agents: Any, max_steps: int = 1000, path: str | os.PathLike | None = None,
                  fps: float = 30, seed: int | None = None) -> Animation:
    """Play one greedy episode (or ``max_steps`` env steps) and write it to ``path`` (``.gif`` or ``.mp4``).

    ``agents``: one agent per seat (a list in seat order or ``{seat: agent}``), or one agent for
    every seat. ``path`` defaults to ``runs/animation_<time>.gif``. ``seed`` seeds the env's reset.
    Returns :class:`Animation` ``(path, frames, steps)`` with ``frames == steps + 1``.
    Everything is checked before the episode starts: the path's extension, ``max_steps``,
    ``fps``, ffmpeg for an MP4, the env's ``rgb_array`` rendering and the agents' seats.
    """
    path = os.path.abspath(_check_path(path))
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer (env steps to play at most), got {max_steps!r}")
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.number)) or not 0 < fps < 1000:
        raise ValueError(f"fps must be a number of frames per second in (0, 1000), got {fps!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    ffmpeg = _find_ffmpeg() if path.endswith(".mp4") else None
    raw, owned = _make_env(env)
    try:
        _check_rendering(raw)
        adapter = adapt(raw)
        spec = make_spec(adapter)
        if not isinstance(agents, (Sequence, Mapping)) or isinstance(agents, str):
            agents = [agents] * spec.num_agents
        seats = check_seats(spec, agents)
        sink: _GifSink | _Mp4Sink = _Mp4Sink(path, float(fps), ffmpeg) if ffmpeg else _GifSink(path, float(fps))
        try:
            steps = _play(raw, adapter, spec, seats, int(max_steps), seed, sink)
            frames = sink.finish()
        except BaseException:
            sink.abort()
            raise
    finally:
        if owned:
            raw.close()
    return Animation(path, frames, steps)


def _check_path(path: str | os.PathLike | None) -> str:
    if path is None:
        return os.path.join("runs", time.strftime("animation_%Y%m%d-%H%M%S.gif"))
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    text = str(os.fspath(path))
    if os.path.splitext(text)[1].lower() not in FORMATS:
        raise ValueError(f"animate_agent writes {' or '.join(FORMATS)} files; got path {text!r}")
    return text


def _find_ffmpeg() -> str:
    found = shutil.which("ffmpeg")
    if found:
        return found
    try:
        import imageio_ffmpeg

        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except Exception:
        pass
    raise RuntimeError("writing an .mp4 needs the ffmpeg program, which was not found: install it (apt install "
                       "ffmpeg, brew install ffmpeg or conda install ffmpeg) or `pip install imageio-ffmpeg`, "
                       "or write a .gif instead")


def _make_env(env: Any) -> tuple[Any, bool]:
    """``(env, made_here)``: an env instance as given, or one made with ``render_mode="rgb_array"``."""
    if isinstance(env, (gym.Env, AECEnv, ParallelEnv)):
        return env, False
    if isinstance(env, str):
        try:
            gym.spec(env)
        except Exception as exc:
            raise ValueError(f"unknown Gymnasium env id {env!r}: {exc}") from None
        return gym.make(env, render_mode="rgb_array"), True
    if type(env).__name__ == "module" and callable(getattr(env, "env", None)):
        return env.env(render_mode="rgb_array"), True
    if callable(env):
        return (env(render_mode="rgb_array") if _takes_render_mode(env) else env()), True
    raise TypeError(f"unsupported env {env!r}: expected a Gymnasium id, an env factory, a PettingZoo env module "
                    f"or an env made with render_mode='rgb_array'")


def _takes_render_mode(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "render_mode" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _check_rendering(env: Any) -> None:
    name = getattr(env, "metadata", {}).get("name") or type(getattr(env, "unwrapped", env)).__name__
    modes = list(getattr(env, "metadata", {}).get("render_modes", []))
    if "rgb_array" not in modes:
        raise ValueError(f"env {name!r} cannot render frames: its render modes are {modes}, and animate_agent "
                         f"needs 'rgb_array'")
    mode = getattr(env, "render_mode", None)
    if mode != "rgb_array":
        raise ValueError(f"env {name!r} was made with render_mode={mode!r}; animate_agent needs "
                         f"render_mode='rgb_array': make it so (e.g. gym.make(id, render_mode='rgb_array')) or pass "
                         f"its Gymnasium id or factory")


def _frame(env: Any) -> np.ndarray:
    frame = env.render()
    arr = np.asarray(frame) if frame is not None else None
    if arr is None or arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.dtype != np.uint8 or 0 in arr.shape:
        what = "None" if arr is None else f"{arr.dtype} array of shape {arr.shape}"
        raise ValueError(f"env.render() returned {what}; expected an RGB image (uint8, height x width x 3)")
    return np.ascontiguousarray(arr[:, :, :3])


def _play(env: Any, adapter: Any, spec: Any, seats: list[Any], max_steps: int, seed: int | None, sink: Any) -> int:
    """One greedy episode: a frame of the reset state and one after every env step; returns the steps."""
    res = adapter.reset(seed=seed)
    sink.add(_frame(env))
    index = {name: k for k, name in enumerate(spec.possible_agents)}
    steps = 0
    while not res.episode_over and res.obs and steps < max_steps:
        actions = {}
        for name, ob in res.obs.items():
            agent = seats[index[name]]
            mask = res.masks[name][None] if spec.has_action_mask else None
            batch: Any = stack_obs([ob])  # a goal env's observation stacks to a dict of arrays
            if accepts_env_ids(agent):
                raw = agent.act(batch, mask, explore=False, env_ids=np.zeros(1, np.int64))
            else:
                raw = agent.act(batch, mask, explore=False)
            _, for_env = check_actions(raw, spec.action_spaces[name], mask, 1,
                                       f"agent {type(agent).__name__} in seat {name!r}")
            actions[name] = for_env[0]
        res = adapter.step(actions)
        steps += 1
        sink.add(_frame(env))
    return steps


class _GifSink:
    """Frames as 8-bit palette images, written as one GIF with Pillow by :meth:`finish`."""

    def __init__(self, path: str, fps: float):
        from PIL import Image

        self.path, self.duration, self.image = path, max(1, round(1000.0 / fps)), Image
        self.frames: list[Any] = []
        self._last_rgb = b""

    def add(self, frame: np.ndarray) -> None:
        im = self.image.fromarray(frame, "RGB").convert("P", palette=self.image.Palette.ADAPTIVE)
        rgb = im.convert("RGB").tobytes()
        if rgb == self._last_rgb:  # Pillow would merge it into the frame before: nudge one colour
            palette = im.getpalette() or []
            k = 3 * int(cast(int, im.getpixel((0, 0)))) + 2
            palette[k] += 1 if palette[k] < 255 else -1
            im.putpalette(palette)
            rgb = im.convert("RGB").tobytes()
        self._last_rgb = rgb
        self.frames.append(im)

    def finish(self) -> int:
        first, rest = self.frames[0], self.frames[1:]
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        write_atomically(self.path, lambda f: first.save(f, format="GIF", save_all=True, append_images=rest,
                                                         duration=self.duration, loop=0), suffix=".gif")
        return len(self.frames)

    def abort(self) -> None:
        self.frames = []


class _Mp4Sink:
    """Frames streamed as raw RGB to an ``ffmpeg`` process writing a temporary file, renamed by :meth:`finish`."""

    def __init__(self, path: str, fps: float, ffmpeg: str):
        self.path, self.fps, self.ffmpeg = path, fps, ffmpeg
        self.proc: subprocess.Popen | None = None
        self.tmp: str | None = None
        self.shape: tuple[int, ...] = ()
        self.frames = 0

    def add(self, frame: np.ndarray) -> None:
        if self.proc is None:
            self._start(frame.shape)
        if frame.shape != self.shape:
            raise ValueError(f"env.render() changed its frame size from {self.shape} to {frame.shape}")
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(frame.tobytes())
        except BrokenPipeError:
            raise RuntimeError(f"ffmpeg stopped early: {self._stderr()}") from None
        self.frames += 1

    def _start(self, shape: tuple[int, ...]) -> None:
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, self.tmp = create_temp(directory, suffix=".mp4")
        os.close(fd)
        self.shape = shape
        height, width = shape[:2]
        cmd = [self.ffmpeg, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{width}x{height}", "-r", f"{self.fps:g}", "-i", "-",
               "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-pix_fmt", "yuv420p", "-f", "mp4", self.tmp]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _stderr(self) -> str:
        assert self.proc is not None and self.proc.stderr is not None
        self.proc.wait(timeout=60)
        return self.proc.stderr.read().decode(errors="replace").strip()[-2000:]

    def finish(self) -> int:
        assert self.proc is not None and self.proc.stdin is not None and self.tmp is not None
        self.proc.stdin.close()
        if self.proc.wait(timeout=600) != 0:
            raise RuntimeError(f"ffmpeg failed (exit {self.proc.returncode}): {self._stderr()}")
        keep_mode(self.path, self.tmp)
        os.replace(self.tmp, self.path)
        self.tmp = None
        fsync_dir(os.path.dirname(self.path))
        return self.frames

    def abort(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.tmp is not None:
            remove_quietly(self.tmp)
