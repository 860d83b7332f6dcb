"""DecentralizedTrainer: one loop for on- and off-policy agents over any PettingZoo/Gymnasium env."""
from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from marl_note.agents.base import is_learning_agent
from marl_note.agents.checkpoint import check_checkpoint_target
from marl_note.envs.adapters import adapt, env_factory, make_spec
from marl_note.envs.main_guard import check_not_reimporting_main
from marl_note.envs.subproc import DEFAULT_STEP_TIMEOUT, SubprocVectorEnv
from marl_note.envs.subproc_errors import check_timeout
from marl_note.envs.vector import SyncVectorEnv
from marl_note.trainers.collector import Collector
from marl_note.trainers.evaluation import baseline_opponents, evaluate_against, use_baseline
from marl_note.trainers.run_state import RunState, load_run, save_run
from marl_note.types import EnvSpec


def _resume_seed(seed: int | None, run: RunState) -> int | None:
    """A resumed run reseeds its envs differently from the original start (no replayed episodes)."""
    return None if seed is None else seed + 7919 * (run.episodes + 1)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _hook_scalar(hook: str, value: Any, kinds: str, wanted: str) -> np.ndarray:
    """``value`` as a 0-d array of a dtype kind in ``kinds``; otherwise a TypeError naming ``hook``."""
    arr = np.asarray(value) if isinstance(value, (bool, int, float, np.generic, np.ndarray)) else None
    if arr is None or arr.ndim != 0 or arr.dtype.kind not in kinds:
        shape = f" of shape {np.shape(value)}" if isinstance(value, np.ndarray) else ""
        raise TypeError(f"{hook} must return {wanted}, got {type(value).__name__}{shape}: {value!r:.80}")
    return arr


def _metric_value(value: Any) -> float:
    """``reward_metric``'s result as a float; not a real number or NaN/inf raises naming the hook."""
    out = float(_hook_scalar("reward_metric", value, "iuf", "a real number (a float or a 0-d array)"))
    if not np.isfinite(out):
        raise ValueError(f"reward_metric returned {out}; it must return a finite number")
    return out


def _stop_value(value: Any) -> bool:
    """``stop_fn``'s result as a bool; None, an array or NaN raises naming the hook."""
    arr = _hook_scalar("stop_fn", value, "biuf", "True (stop) or False (go on)")
    if np.isnan(arr.astype(np.float64)):
        raise ValueError("stop_fn returned nan; it must return True (stop) or False (go on)")
    return bool(arr)


class DecentralizedTrainer:
    """Train one agent per seat (the same object may sit in several seats) on vectorized envs.

    ``update_freq`` counts env steps between updates, ``test_freq`` counts training episodes
    between tests, ``episodes_per_train`` is the training budget in episodes. Hooks:
    ``train_fn(num_collected_episodes, num_collected_steps)`` before each collection chunk,
    ``test_fn`` likewise before each test, ``save_best_fn(num_collected_episodes)`` on a new best
    test metric, ``save_last_fn()`` when training ends, ``stop_fn(metric, num_collected_episodes)``
    after each test (True stops), ``reward_metric(rewards[num_episodes, num_agents]) -> float``
    (default: mean return of the learning seats). A ``reward_metric`` result that is not a real
    number (TypeError) or is NaN/inf (ValueError), and a ``stop_fn`` result that is not a single
    truth value (None, an array: TypeError; NaN: ValueError), raise naming the hook at the first test.
    ``check_finite`` (default True) makes the train and test collectors raise
    :class:`~marl_note.types.NonFiniteError` for a NaN/inf reward or float observation, naming the
    env index, agent and env step; ``check_finite=False`` turns that check off.

    ``processes=N`` hosts the envs in N worker processes (default None: in this process); the env
    may then be given in any form (a Gymnasium id, a lambda, a closure, ``simple_spread_v3.parallel_env``)
    and a script must keep its body under ``if __name__ == "__main__":``. ``step_timeout`` (seconds,
    default 60, None: no bound) bounds every reset/step of a worker process: a stuck env raises
    :class:`~marl_note.envs.subproc.EnvTimeoutError` naming the env, worker pid and call, its worker
    is killed and the pool closed. In-process envs (``processes=None``) run in the trainer's own
    thread, where a stuck call cannot be interrupted safely, so the bound needs ``processes >= 1``.

    Example:
        >>> from marl_note.agents import RandomAgent
        >>> from marl_note.agents.torch import DQN
        >>> trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=2, num_test_envs=2, update_freq=20,
        ...                                episodes_per_train=4, test_freq=2, episodes_per_test=2, seed=0)
        >>> dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0)
        >>> stats = trainer.train([dqn], learning_mask=[1], plot=False, progress=False)
        >>> stats["num_collected_episodes"] >= 4
        True
    """

    def __init__(self, env: Any, num_train_envs: int = 16, num_test_envs: int = 16, batch_size: int = 64,
                 update_freq: int = 100, test_freq: int = 100, episodes_per_train: int = 5000,
                 episodes_per_test: int = 50, train_fn: Callable | None = None, test_fn: Callable | None = None,
                 save_best_fn: Callable | None = None, save_last_fn: Callable | None = None,
                 stop_fn: Callable | None = None, reward_metric: Callable | None = None,
                 shared_memory: bool = True, seed: int | None = None, processes: int | None = None,
                 plot_path: str | None = None, step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
                 check_finite: bool = True):
        check_not_reimporting_main("DecentralizedTrainer")
        self.env_fn = env_factory(env)
        self.check_finite = bool(check_finite)
        self.num_train_envs = _positive_int("num_train_envs", num_train_envs)
        self.num_test_envs = _positive_int("num_test_envs", num_test_envs)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.update_freq = _positive_int("update_freq", update_freq)
        self.test_freq = _positive_int("test_freq", test_freq)
        self.episodes_per_train = _positive_int("episodes_per_train", episodes_per_train)
        self.episodes_per_test = _positive_int("episodes_per_test", episodes_per_test)
        for name, fn in (("train_fn", train_fn), ("test_fn", test_fn), ("save_best_fn", save_best_fn),
                         ("save_last_fn", save_last_fn), ("stop_fn", stop_fn), ("reward_metric", reward_metric)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        if processes is not None and _positive_int("processes", processes) < 1:
            raise ValueError("processes must be >= 1")
        self.train_fn, self.test_fn = train_fn, test_fn
        self.save_best_fn, self.save_last_fn, self.stop_fn = save_best_fn, save_last_fn, stop_fn
        self.reward_metric = reward_metric
        self.shared_memory, self.processes = shared_memory, processes
        self.step_timeout = check_timeout("step_timeout", step_timeout)
        self.seed = seed
        self.plot_path = plot_path
        probe = adapt(self.env_fn())
        try:
            self.spec: EnvSpec = make_spec(probe)
        finally:
            probe.close()
        self._train_venv = self._test_venv = None
        self.history: list[tuple[int, float]] = []
        self._run: RunState | None = None
        self._run_agents: list[Any] = []

    # ------------------------------------------------------------------ spaces
    @property
    def possible_agents(self) -> list[str]:
        return list(self.spec.possible_agents)

    def observation_space(self, agent: str):
        return self.spec.observation_space(agent)

    def action_space(self, agent: str):
        return self.spec.action_space(agent)

    # ------------------------------------------------------------------ validation
    def _seats(self, agents: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        names = self.spec.possible_agents
        if isinstance(agents, Mapping):
            missing = [a for a in names if a not in agents]
            extra = [a for a in agents if a not in names]
            if missing or extra:
                raise ValueError(f"agents dict must have exactly the env's agents {list(names)}; "
                                 f"missing {missing}, unknown {extra}")
            seats = [agents[a] for a in names]
        elif isinstance(agents, Sequence) and not isinstance(agents, str):
            if len(agents) != len(names):
                raise ValueError(f"got {len(agents)} agents for an env with {len(names)} seats {list(names)}")
            seats = list(agents)
        else:
            raise TypeError(f"agents must be a list (one per seat) or a dict keyed by agent id, got {type(agents).__name__}")
        for name, agent in zip(names, seats):
            if not callable(getattr(agent, "act", None)):
                raise TypeError(f"agent for seat {name!r} ({type(agent).__name__}) has no act(obs, mask, explore) method")
            space = getattr(agent, "action_space", None)
            if space is not None and space != self.spec.action_space(name):
                raise ValueError(f"agent for seat {name!r} has action space {space}, "
                                 f"but the seat's is {self.spec.action_space(name)}")
            space = getattr(agent, "observation_space", None)
            if space is not None and space != self.spec.observation_space(name):
                raise ValueError(f"agent for seat {name!r} has observation space {space}, "
                                 f"but the seat's is {self.spec.observation_space(name)}")
        return seats

    def _mask(self, mask: Any, what: str) -> list[bool]:
        n = self.spec.num_agents
        if isinstance(mask, Mapping):
            unknown = [a for a in mask if a not in self.spec.possible_agents]
            if unknown:
                raise ValueError(f"{what} names unknown agents {unknown}")
            mask = [mask.get(a, 0) for a in self.spec.possible_agents]
        mask = list(np.asarray(mask).reshape(-1)) if not isinstance(mask, (list, tuple)) else list(mask)
        if len(mask) != n:
            raise ValueError(f"{what} has {len(mask)} entries for an env with {n} seats {list(self.spec.possible_agents)}")
        if any(m not in (0, 1, True, False) for m in mask):
            raise ValueError(f"{what} entries must be 0/1 or booleans, got {mask}")
        return [bool(m) for m in mask]

    def _metric(self, rewards: np.ndarray, learn: list[bool]) -> float:
        if self.reward_metric is not None:
            return _metric_value(self.reward_metric(rewards))
        return float(rewards[:, np.flatnonzero(learn)].mean()) if len(rewards) else float("nan")

    def _venv(self, n: int):
        fns = [self.env_fn] * n
        if self.processes is not None:
            return SubprocVectorEnv(fns, processes=self.processes, shared_memory=self.shared_memory,
                                    timeout=self.step_timeout)
        return SyncVectorEnv(fns)

    @staticmethod
    def _usable(venv: Any) -> bool:
        """A vector env that a timeout or a dead worker has closed is rebuilt on the next use."""
        return venv is not None and not getattr(venv, "closed", False)

    # ------------------------------------------------------------------ test
    def test(self, agents: Sequence[Any] | Mapping[str, Any], episodes: int | None = None,
             learning_mask: Sequence[int] | None = None) -> dict[str, Any]:
        """Play ``episodes`` greedy episodes (no exploration, no learning) on the test envs."""
        seats = self._seats(agents)
        episodes = self.episodes_per_test if episodes is None else _positive_int("episodes", episodes)
        learn = self._mask(learning_mask, "learning_mask") if learning_mask is not None else [True] * len(seats)
        if not self._usable(self._test_venv):
            self._test_venv = self._venv(self.num_test_envs)
        col = Collector(self._test_venv, self.spec, seats, explore=[False] * len(seats), learn=[False] * len(seats),
                        check_finite=self.check_finite)
        col.reset(seed=None if self.seed is None else self.seed + 100_000 + len(self.history) * self.num_test_envs)
        stats = col.collect(n_episodes=episodes)
        rewards = stats.returns_array(self.spec.num_agents)
        return {"rewards": rewards, "reward": self._metric(rewards, learn),
                "reward_std": float(rewards.mean(axis=1).std()) if len(rewards) else float("nan"),
                "mean_num_steps": float(np.mean(stats.lengths)), "num_collected_steps": stats.env_steps,
                "num_collected_agent_steps": stats.agent_steps, "num_collected_episodes": stats.episodes}

    def test_against(self, agent: Any, opponent: Any = None, episodes: int | None = None) -> dict[str, Any]:
        """Greedy games of ``agent`` in each seat in turn against a fixed ``opponent`` in the others.

        ``opponent``: an agent (the same in every other seat), a ``{seat: agent}`` dict, or None for
        a random legal-move player. ``episodes`` (default ``episodes_per_test``) are shared evenly
        over the seats. Returns ``reward`` (the metric: ``reward_metric`` per seat averaged, else
        the agent's mean return), ``per_seat`` (``{seat: {mean_return, win, draw, loss,
        episodes}}``, a win meaning a return above every other seat's), ``rewards``,
        ``learner_seat`` and the counters of :meth:`test`.
        """
        names = self.spec.possible_agents
        self._seats([agent] * len(names))
        opponents = baseline_opponents(self.spec, opponent, seed=None if self.seed is None else self.seed + 55_555)
        self._seats([opponents[a] for a in names])
        episodes = self.episodes_per_test if episodes is None else _positive_int("episodes", episodes)
        return evaluate_against(self, agent, opponents, episodes)

    # ------------------------------------------------------------------ train
    def train(self, agents: Sequence[Any] | Mapping[str, Any], learning_mask: Sequence[int] | Mapping[str, int],
              exploration_mask: Sequence[int] | None = None, plot: bool = True, progress: bool = True,
              test_agents: Sequence[Any] | Mapping[str, Any] | None = None, matchmaker: Callable | None = None,
              callbacks: Sequence[Any] = (), checkpoint_path: str | None = None,
              resume_from: str | None = None, baseline: Any = "auto") -> dict[str, Any]:
        """Train the seats in ``learning_mask``; see the class docstring for the loop and hooks.

        ``test_agents`` (default: ``agents``) are the seats of the periodic tests, e.g. the learner
        against a fixed opponent in a self-play run. When ``test_agents`` is None and one learner
        holds every seat of a constant-sum game (judged from the training episodes before the
        first test), the periodic tests play it against ``baseline`` in each seat instead of
        against itself (:meth:`test_against`; the default ``"auto"`` is a random legal-move
        player; an agent or ``{seat: agent}`` dict is used for any such run; None turns it off),
        and the metric is its mean return there. ``matchmaker(env_index) -> (agents, explore,
        learn, tag)`` reseats an env at the start of each of its episodes (see
        :class:`~marl_note.trainers.selfplay.OpponentPool`). ``callbacks`` are objects with any of
        ``on_train_begin(trainer)``, ``on_collect_end(trainer, stats, episodes)``,
        ``on_update_end(trainer, metrics, episodes)``, ``on_test_end(trainer, result, episodes)``,
        ``on_train_end(trainer, stats)`` (which may add keys to the returned statistics) and
        ``plot_series() -> {label: [(episodes, value), ...]}`` (drawn on the plot).
        ``checkpoint_path`` saves the whole run there (atomically) after every test and at the end;
        it must be a new or empty directory, one holding a previous checkpoint (other files there,
        such as plots, are kept) or a ``.zip`` path; anything else is refused before training starts.
        ``resume_from`` continues a saved run with the same agents (their states, replay buffers,
        counters and history are loaded; episodes in flight when it was saved start afresh).
        """
        seats = self._seats(agents)
        test_seats = seats if test_agents is None else self._seats(test_agents)
        learn = self._mask(learning_mask, "learning_mask")
        explore = learn if exploration_mask is None else self._mask(exploration_mask, "exploration_mask")
        if not any(learn):
            raise ValueError("learning_mask has no learning seat: at least one seat must learn (use test() to only play)")
        for name, agent, ln in zip(self.spec.possible_agents, seats, learn):
            joint = getattr(agent, "joint_learner", None)
            if joint is not None:
                if not (callable(getattr(joint, "observe_joint", None)) and callable(getattr(joint, "update", None))):
                    raise TypeError(f"seat {name!r}: joint_learner {type(joint).__name__} needs observe_joint() and update()")
                if self.spec.turn_based and ln:
                    raise TypeError(f"seat {name!r}: {type(joint).__name__} learns from joint per-step data, "
                                    f"which needs a Parallel env; this env is turn-based")
            elif ln and not is_learning_agent(agent):
                raise TypeError(f"seat {name!r} is marked as learning but {type(agent).__name__} has no "
                                f"observe()/update() methods")
        if checkpoint_path is not None:
            check_checkpoint_target(checkpoint_path)  # a foreign directory is refused before any work
        if not self._usable(self._train_venv):
            self._train_venv = self._venv(self.num_train_envs)
        if matchmaker is not None and not callable(matchmaker):
            raise TypeError(f"matchmaker must be callable, got {type(matchmaker).__name__}")
        opponents = None
        if baseline is not None:
            opponents = baseline_opponents(self.spec, None if isinstance(baseline, str) else baseline,
                                           seed=None if self.seed is None else self.seed + 55_555)
            if isinstance(baseline, str) and baseline != "auto":
                raise ValueError(f"baseline must be 'auto', None, an agent or a {{seat: agent}} dict; got {baseline!r}")
            self._seats([opponents[a] for a in self.spec.possible_agents])
        baseline_on: bool | None = None  # decided at the first test
        callbacks = list(callbacks)

        def fire(event: str, *args: Any) -> None:
            for cb in callbacks:
                fn = getattr(cb, event, None)
                if fn is not None:
                    fn(self, *args)

        run = RunState(next_test=self.test_freq)
        if resume_from is not None:
            run = load_run(resume_from, seats)  # checks everything before loading anything
        self._run, self._run_agents = run, seats
        self.history = run.history
        fire("on_train_begin")
        col = Collector(self._train_venv, self.spec, seats, explore=explore, learn=learn, matchmaker=matchmaker,
                        check_finite=self.check_finite)
        col.reset(seed=self.seed if resume_from is None else _resume_seed(self.seed, run))
        from marl_note.trainers.progress import Progress  # tqdm lives there

        bar = Progress(self.episodes_per_train, enabled=progress)
        last_metrics: dict[str, float] = {}
        last_test: dict[str, Any] = {}
        start = time.perf_counter() - run.training_time
        stopped = False
        try:
            while run.episodes < self.episodes_per_train and not stopped:
                if self.train_fn is not None:
                    self.train_fn(run.episodes, run.env_steps)
                stats = col.collect(n_steps=self.update_freq)
                run.env_steps += stats.env_steps
                run.agent_steps += stats.agent_steps
                run.episodes += stats.episodes
                run.recent_returns = (run.recent_returns + [r.tolist() for r in stats.returns])[-100:]
                col.flush()
                fire("on_collect_end", stats, run.episodes)
                if run.env_steps == stats.env_steps and run.episodes >= self.episodes_per_train > 1:
                    warnings.warn(f"the first collection chunk (update_freq={self.update_freq} env steps) already "
                                  f"finished {run.episodes} episodes, the whole budget of episodes_per_train="
                                  f"{self.episodes_per_train}: the agents are updated once per chunk, so this run "
                                  f"updates them only once. Lower update_freq.", stacklevel=2)
                for agent in col.learners:
                    metrics = agent.update(self.batch_size) or {}
                    run.updates += int(metrics.get("gradient_steps", 0))
                    last_metrics = {k: float(v) for k, v in metrics.items() if np.isscalar(v)}
                    fire("on_update_end", metrics, run.episodes)
                if run.episodes >= run.next_test or run.episodes >= self.episodes_per_train:
                    run.next_test = (run.episodes // self.test_freq + 1) * self.test_freq
                    if self.test_fn is not None:
                        self.test_fn(run.episodes, run.env_steps)
                    if baseline_on is None:
                        recent = np.asarray(run.recent_returns, dtype=np.float64).reshape(-1, self.spec.num_agents)
                        baseline_on = use_baseline(baseline, seats, test_agents, recent)
                    if baseline_on:
                        result = evaluate_against(self, seats[0], opponents, self.episodes_per_test)
                    else:
                        result = self.test(test_seats, learning_mask=learn)
                    last_test = result
                    fire("on_test_end", result, run.episodes)
                    metric = result["reward"]
                    run.history.append((run.episodes, metric))
                    if metric > run.best:
                        run.best, run.best_episode = metric, run.episodes
                        if self.save_best_fn is not None:
                            self.save_best_fn(run.episodes)
                    if self.stop_fn is not None and _stop_value(self.stop_fn(metric, run.episodes)):
                        stopped = True
                    if checkpoint_path is not None:
                        run.training_time = time.perf_counter() - start
                        self.save_checkpoint(checkpoint_path)
                recent = np.asarray(run.recent_returns, dtype=np.float64).reshape(-1, self.spec.num_agents)
                bar.update(run.episodes, env_steps=run.env_steps,
                           train_reward=self._metric(recent, learn) if len(recent) and not baseline_on else None,
                           test_metric=run.history[-1][1] if run.history else None,
                           best=run.best if run.history else None,
                           **{k: v for k, v in last_metrics.items() if k in ("loss", "eps", "epsilon")})
        finally:
            bar.close()
        run.training_time = time.perf_counter() - start
        if checkpoint_path is not None:
            self.save_checkpoint(checkpoint_path)
        if self.save_last_fn is not None:
            self.save_last_fn()
        metrics_hist = np.array([m for _, m in run.history], dtype=np.float64)
        out = {
            "reward_metric_stats": {"last": float(metrics_hist[-1]), "mean": float(metrics_hist.mean()),
                                    "std": float(metrics_hist.std()), "max": float(metrics_hist.max()),
                                    "min": float(metrics_hist.min())} if len(metrics_hist) else {},
            "num_collected_steps": run.env_steps, "num_collected_agent_steps": run.agent_steps,
            "num_collected_episodes": run.episodes, "num_gradient_steps": run.updates,
            "training_time": run.training_time, "best_reward": float(run.best),
            "best_episode": run.best_episode, "stopped_by_stop_fn": stopped, "test_history": list(run.history),
            "tested_against_baseline": bool(baseline_on),
        }
        if "per_seat" in last_test:
            out["last_test_per_seat"] = last_test["per_seat"]
        fire("on_train_end", out)
        if plot and run.history:
            from marl_note.trainers.plot import plot_metric

            extra = {}
            for cb in callbacks:
                if callable(getattr(cb, "plot_series", None)):
                    extra.update(cb.plot_series())
            out["plot_path"] = plot_metric(run.history, self.plot_path, extra=extra)
            print(f"marl_note: wrote the reward-metric plot to {out['plot_path']}")
        return out

    def save_checkpoint(self, path: str, include_replay: bool = True) -> str:
        """Save the current (or last) run: every distinct agent's state, replay, counters, history.

        Resume it with ``train(same agents, ..., resume_from=path)``.
        """
        if self._run is None:
            raise RuntimeError("no run to checkpoint yet: call train() first")
        settings = {"episodes_per_train": self.episodes_per_train, "update_freq": self.update_freq,
                    "test_freq": self.test_freq, "batch_size": self.batch_size, "seed": self.seed,
                    "possible_agents": list(self.spec.possible_agents)}
        return save_run(path, self._run, self._run_agents, settings, include_replay=include_replay)

    def close(self) -> None:
        for venv in (self._train_venv, self._test_venv):
            if venv is not None:
                venv.close()
        self._train_venv = self._test_venv = None
