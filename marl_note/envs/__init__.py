"""Env adapters (Gymnasium, PettingZoo AEC and Parallel) to one contract, and vector envs."""
from marl_note.envs.adapters import AECAdapter, GymAdapter, ParallelAdapter, StepResult, adapt, env_factory, make_spec
from marl_note.envs.goal_envs import BitFlippingEnv, PointReachEnv
from marl_note.envs.main_guard import MissingMainGuardError
from marl_note.envs.subproc import SubprocVectorEnv
from marl_note.envs.subproc_errors import EnvTimeoutError
from marl_note.envs.vector import AutoResetWorker, SyncVectorEnv
from marl_note.envs.wrappers import AgentIdAEC, AgentIdFeature, AgentIdParallel, pad_seats, with_agent_id

__all__ = ["AECAdapter", "GymAdapter", "ParallelAdapter", "StepResult", "adapt", "env_factory", "make_spec",
           "AutoResetWorker", "SyncVectorEnv", "BitFlippingEnv", "PointReachEnv",
           "SubprocVectorEnv", "EnvTimeoutError", "MissingMainGuardError", "AgentIdAEC", "AgentIdParallel",
           "AgentIdFeature", "pad_seats", "with_agent_id"]
