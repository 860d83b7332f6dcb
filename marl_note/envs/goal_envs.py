"""Two small goal-conditioned Gymnasium envs for hindsight experience replay.

Both follow the goal-env convention: a Dict observation with ``observation``,
``achieved_goal`` and ``desired_goal``, a sparse reward (0 on success, -1 otherwise),
and ``compute_reward(achieved_goal, desired_goal, info)`` vectorized over a leading
batch axis so a relabeler can recompute rewards for substituted goals.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np


class BitFlippingEnv(gym.Env):
    """Flip one of ``n_bits`` bits per step until the state equals the goal bit string.

    Observation: Dict of ``MultiBinary(n_bits)`` (int8) entries; ``observation`` and
    ``achieved_goal`` are the current bits. Reward 0 on success (and the episode
    terminates), -1 otherwise; truncation after ``max_steps`` (default ``n_bits``) steps.
    The initial state never equals the goal.

    Example:
        >>> env = BitFlippingEnv(n_bits=4)
        >>> obs, info = env.reset(seed=0)
        >>> wrong = np.flatnonzero(obs["achieved_goal"] != obs["desired_goal"])
        >>> for bit in wrong:
        ...     obs, reward, terminated, truncated, info = env.step(int(bit))
        >>> reward, terminated, info["is_success"]
        (0.0, True, True)
        >>> env.compute_reward(np.array([[0, 1, 1, 0], [1, 1, 1, 0]]), np.array([[0, 1, 1, 0]] * 2), {}).tolist()
        [0.0, -1.0]
    """

    metadata = {"render_modes": []}

    def __init__(self, n_bits: int = 8, max_steps: int | None = None):
        if int(n_bits) < 1:
            raise ValueError(f"n_bits must be >= 1, got {n_bits}")
        self.n_bits = int(n_bits)
        self.max_steps = self.n_bits if max_steps is None else int(max_steps)
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        bits = gym.spaces.MultiBinary(self.n_bits)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": gym.spaces.MultiBinary(self.n_bits),
             "desired_goal": gym.spaces.MultiBinary(self.n_bits)})
        self.action_space = gym.spaces.Discrete(self.n_bits)
        self._state = np.zeros(self.n_bits, np.int8)
        self._goal = np.ones(self.n_bits, np.int8)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": self._state.copy(), "achieved_goal": self._state.copy(),
                "desired_goal": self._goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.int8)
        self._goal = self._state.copy()
        while np.array_equal(self._goal, self._state):
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.int8)
        self._steps = 0
        return self._obs(), {"is_success": False}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r} for {self.action_space}")
        self._state[int(action)] ^= 1
        self._steps += 1
        obs = self._obs()
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}))
        success = reward == 0.0
        return obs, reward, success, (not success) and self._steps >= self.max_steps, {"is_success": success}

    def compute_reward(self, achieved_goal, desired_goal, info) -> np.ndarray:
        """0 where the bit strings match exactly, -1 elsewhere (float32, batch shape)."""
        achieved_goal, desired_goal = np.asarray(achieved_goal), np.asarray(desired_goal)
        if achieved_goal.shape != desired_goal.shape or achieved_goal.shape[-1:] != (self.n_bits,):
            raise ValueError(f"goals must both have shape (..., {self.n_bits}), got "
                             f"{achieved_goal.shape} and {desired_goal.shape}")
        return np.where(np.any(achieved_goal != desired_goal, axis=-1), np.float32(-1.0), np.float32(0.0))


class PointReachEnv(gym.Env):
    """Move a point in the square ``[-1, 1]^2`` to a goal; actions are velocity in ``[-1, 1]^2``.

    Each step moves the point by ``step_size * action`` (clipped to the square). Reward 0
    when within ``tolerance`` of the goal (the episode terminates), -1 otherwise;
    truncation after ``max_steps`` (default 50).

    Example:
        >>> env = PointReachEnv()
        >>> obs, info = env.reset(seed=1)
        >>> for _ in range(50):
        ...     direction = obs["desired_goal"] - obs["achieved_goal"]
        ...     action = np.clip(direction / env.step_size, -1, 1).astype(np.float32)
        ...     obs, reward, terminated, truncated, info = env.step(action)
        ...     if terminated or truncated:
        ...         break
        >>> reward, terminated
        (0.0, True)
    """

    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 50, step_size: float = 0.1, tolerance: float = 0.05):
        if int(max_steps) < 1 or not step_size > 0 or not tolerance > 0:
            raise ValueError("max_steps, step_size and tolerance must be positive")
        self.max_steps, self.step_size, self.tolerance = int(max_steps), float(step_size), float(tolerance)
        square = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": square, "achieved_goal": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
             "desired_goal": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._pos = np.zeros(2, np.float32)
        self._goal = np.zeros(2, np.float32)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": self._pos.copy(), "achieved_goal": self._pos.copy(), "desired_goal": self._goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._goal = self._pos
        while np.linalg.norm(self._goal - self._pos) <= self.tolerance:
            self._goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._steps = 0
        return self._obs(), {"is_success": False}

    def step(self, action):
        action = np.asarray(action, dtype=np.float32)
        if action.shape != (2,) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be 2 finite numbers, got {action!r}")
        self._pos = np.clip(self._pos + self.step_size * np.clip(action, -1, 1), -1, 1).astype(np.float32)
        self._steps += 1
        obs = self._obs()
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}))
        success = reward == 0.0
        return obs, reward, success, (not success) and self._steps >= self.max_steps, {"is_success": success}

    def compute_reward(self, achieved_goal, desired_goal, info) -> np.ndarray:
        """0 within ``tolerance`` (Euclidean), -1 elsewhere (float32, batch shape)."""
        achieved_goal, desired_goal = np.asarray(achieved_goal), np.asarray(desired_goal)
        if achieved_goal.shape != desired_goal.shape or achieved_goal.shape[-1:] != (2,):
            raise ValueError(f"goals must both have shape (..., 2), got {achieved_goal.shape} and {desired_goal.shape}")
        distance = np.linalg.norm(achieved_goal.astype(np.float64) - desired_goal, axis=-1)
        return np.where(distance > self.tolerance, np.float32(-1.0), np.float32(0.0))
