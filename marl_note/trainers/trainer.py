"""DecentralizedTrainer: one loop for on- and off-policy agents over any PettingZoo/Gymnasium env."""
from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from marl_note import _moved
from marl_note.agents.base import Agent
from marl_note.agents.checkpoints.format import check_checkpoint_target
from marl_note.agents.threads import check_threads, use_threads
from marl_note.distributed import DistributedContext
from marl_note.envs.adapters import adapt, env_factory, make_spec
from marl_note.envs.main_guard import check_not_reimporting_main
from marl_note.envs.subproc import DEFAULT_STEP_TIMEOUT, SubprocVectorEnv
from marl_note.envs.subproc_errors import check_timeout
from marl_note.envs.vector import SyncVectorEnv
from marl_note.trainers.callbacks import CallbackList, EpisodeEvents, metric_value
from marl_note.trainers.collector import Collector
from marl_note.trainers.env_memory import check_envs_fit, workers_of
from marl_note.trainers.evaluation import baseline_opponents, evaluate_against
from marl_note.trainers.plot import check_plot_path
from marl_note.trainers.run_loop import RunLoop
from marl_note.trainers.run_state import RunState, distinct, load_run, save_run
from marl_note.trainers.seats import check_learners, check_seats, learner_of, positive_int, seat_flags
from marl_note.trainers.series import Recorder, learner_labels
from marl_note.trainers.settings import RunSettings
from marl_note.trainers.source import CollectorSource, ExperienceSource
from marl_note.types import EnvSpec
from marl_note.validation import MAX_COUNT
from marl_note.validation import positive_int as count

Seats = Sequence[Agent] | Mapping[str, Agent]  # one agent per seat, in seat order or keyed by agent id


def _resume_seed(seed: int | None, run: RunState) -> int | None:
    """A resumed run reseeds its envs differently from the original start (no replayed episodes)."""
    return None if seed is None else seed + 7919 * (run.episodes + 1)


class DecentralizedTrainer:
    """Train one agent per seat (the same object may sit in several seats) on vectorized envs.

    Training runs in chunks: the train envs advance together until the chunk holds ``update_freq``
    env steps, then every learner updates once (one update round); after the first chunk that
    passes a multiple of ``test_freq`` training episodes, and after the last chunk, a periodic
    test runs. The budget arguments count:

    - ``update_freq``: env steps per chunk, summed over the train envs (one vector step of
      ``num_train_envs`` envs is ``num_train_envs`` env steps; a chunk ends on a whole vector step);
    - ``test_freq``: finished training episodes between periodic tests;
    - ``episodes_per_train``: the training budget, in finished training episodes;
    - ``episodes_per_test``: episodes per periodic test, shared over the test envs.

    Every count (these, ``batch_size`` and the env counts) is a positive integer of at most
    :data:`~marl_note.validation.MAX_COUNT`; env counts whose envs (and worker processes) cannot
    fit in the machine's available memory are refused before any env is built
    (:mod:`marl_note.trainers.env_memory`).

    Hooks:
    ``train_fn(num_collected_episodes, num_collected_steps)`` before each collection chunk,
    ``test_fn`` likewise before each test, ``save_best_fn(num_collected_episodes)`` on a new best
    test metric, ``save_last_fn()`` when training ends, ``stop_fn(metric, num_collected_episodes)``
    after each test (True stops; so does ``trainer.stop_training = True`` set by any hook or
    callback, after the current chunk), ``reward_metric(rewards[num_episodes, num_agents]) -> float``
    (default: mean return of the learning seats). A ``reward_metric`` result that is not a real
    number (TypeError) or is NaN/inf (ValueError), and a ``stop_fn`` result that is not a bool (a
    numpy bool too; a number, None, a string or an array: TypeError), raise naming the hook at the
    first test. ``check_finite`` (default True) makes the train and test collectors raise
    :class:`~marl_note.types.NonFiniteError` for a NaN/inf reward or float observation, naming the
    env index, agent and env step; ``check_finite=False`` turns that check off. Every observation
    is also checked against its space (shape; numbers, whole ones for an integer space): a
    ``ValueError`` names the env index, agent, step, the space and what came; a value outside the
    space's bounds warns once per space.

    ``processes=N`` hosts the envs in N worker processes (default None: in this process); the env
    may then be given in any form (a Gymnasium id, a lambda, a closure, ``simple_spread_v3.parallel_env``)
    and a script must keep its body under ``if __name__ == "__main__":``. ``step_timeout`` (seconds,
    default 60, None: no bound) bounds every reset/step of a worker process: a stuck env raises
    :class:`~marl_note.envs.subproc.EnvTimeoutError` naming the env, worker pid and call, its worker
    is killed and the pool closed. In-process envs (``processes=None``) run in the trainer's own
    thread, where a stuck call cannot be interrupted safely, so the bound needs ``processes >= 1``.

    ``distributed`` (a :class:`~marl_note.distributed.DistributedContext`, e.g. from
    :func:`marl_note.contrib.distributed.torch.ddp.init_distributed`) makes this one rank of a
    multi-process run: every rank collects on its own train envs (seeded ``seed + rank *
    1_000_003``) into its own replay and its learners sample ``batch_size / world_size`` each
    (``batch_size`` is the global batch), with gradients averaged over the ranks. ``train_fn`` runs
    on every rank; the tests, ``test_fn``, ``save_best_fn``, ``save_last_fn``, ``stop_fn``,
    ``reward_metric`` of the tests, the callbacks, the progress bar, checkpoints and the plot run
    on rank 0 alone, and rank 0's decision to stop (budget, ``stop_fn``, ``stop_training``) is
    every rank's, after each chunk.

    ``threads`` is the intra-op thread count of the frameworks (PyTorch, TensorFlow) during
    ``train()``: ``"auto"`` (the default) is one thread, which the small networks of these runs
    train fastest with, idle and much more so on a busy machine (:mod:`marl_note.agents.threads`,
    ``bench/bench_threads.py``); a positive integer asks for more; None leaves the frameworks'
    defaults (one thread per core). PyTorch's count is restored when ``train()`` returns;
    TensorFlow's pools are fixed when its runtime starts, so a TF run takes the count only if it
    was set before its agents were built (``use_threads(n, backend="tf")``, as the command line
    does). ``trainer.threads_in_effect`` says what each imported framework used.

    ``source`` (an :class:`~marl_note.trainers.source.ExperienceSource`) is where the training
    experience comes from: by default (None) a :class:`~marl_note.trainers.source.CollectorSource`
    steps the train envs in this process (or in ``processes`` worker processes);
    ``source=marl_note.contrib.pool.ActorPool(actors=N, ...)`` has N actor processes own the train
    envs and write into shared-memory shards while this process trains (the "pool network").
    Release 0.1.0's ``actors=N, sync_every=K, pool={...}`` still build that ``ActorPool``, with a
    DeprecationWarning.

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
                 check_finite: bool = True, distributed: DistributedContext | None = None,
                 source: ExperienceSource | None = None, actors: int | None = None, sync_every: int | None = None,
                 pool: Mapping[str, Any] | None = None, threads: int | str | None = "auto"):
        check_not_reimporting_main("DecentralizedTrainer")
        self.threads = check_threads(threads)
        self.threads_in_effect: dict[str, int] = {}  # {framework: intra-op threads} of the last train()
        self.env_fn = env_factory(env)
        self.check_finite = bool(check_finite)
        self.num_train_envs = count("num_train_envs", num_train_envs, maximum=MAX_COUNT)
        self.num_test_envs = count("num_test_envs", num_test_envs, maximum=MAX_COUNT)
        self.settings = RunSettings(batch_size, update_freq)  # the one owner of batch_size and update_freq
        self.test_freq = count("test_freq", test_freq, maximum=MAX_COUNT)
        self.episodes_per_train = count("episodes_per_train", episodes_per_train, maximum=MAX_COUNT)
        self.episodes_per_test = count("episodes_per_test", episodes_per_test, maximum=MAX_COUNT)
        for name, fn in (("train_fn", train_fn), ("test_fn", test_fn), ("save_best_fn", save_best_fn),
                         ("save_last_fn", save_last_fn), ("stop_fn", stop_fn), ("reward_metric", reward_metric)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        if processes is not None and positive_int("processes", processes) < 1:
            raise ValueError("processes must be >= 1")
        if actors is not None or sync_every is not None or pool is not None:  # release 0.1.0's arguments
            if source is not None:
                raise ValueError("give source=ActorPool(...) or the old actors=/sync_every=/pool=, not both")
            source = _moved.actor_pool(actors, sync_every, pool)
        if source is not None and not isinstance(source, ExperienceSource):
            raise TypeError(f"source must be an ExperienceSource (marl_note.trainers.source), "
                            f"got {type(source).__name__}")
        self.source: ExperienceSource = CollectorSource() if source is None else source
        self.train_fn, self.test_fn = train_fn, test_fn
        self.save_best_fn, self.save_last_fn, self.stop_fn = save_best_fn, save_last_fn, stop_fn
        self.reward_metric = reward_metric
        self.shared_memory, self.processes = shared_memory, processes
        self.step_timeout = check_timeout("step_timeout", step_timeout)
        self.seed = seed
        if distributed is not None and not isinstance(distributed, DistributedContext):
            raise TypeError(f"distributed must be a DistributedContext, got {type(distributed).__name__}")
        self.distributed = DistributedContext() if distributed is None else distributed
        self.distributed.shard_batch(self.batch_size)  # the global batch must split evenly over the ranks
        self.settings.check_batch = self.distributed.shard_batch
        self.source.check(self)
        self.plot_path = check_plot_path(plot_path)  # a .png path, checked before any work
        workers = workers_of(self.num_train_envs, self.num_test_envs, processes, actors)
        check_envs_fit(self.num_train_envs, self.num_test_envs, workers, warn=False)  # before building one
        raw_probe = self.env_fn()
        self.env_name = _env_name(raw_probe)  # for the plot's title; None when the env does not say
        probe = adapt(raw_probe)
        try:
            self.spec: EnvSpec = make_spec(probe)
        finally:
            probe.close()
        check_envs_fit(self.num_train_envs, self.num_test_envs, workers, self.spec)  # with its observations
        self._train_venv = self._test_venv = None
        self.stop_training = False  # set True (by a callback or hook) to end training after the current chunk
        # set through limit_collection() for one train() (a budget): limit(kind, env_steps) -> True ends a collection
        self.collect_limit: Callable[[str, int], bool] | None = None
        # set with it: {"env_steps": n or None, "minutes": m or None}, what the progress display counts against
        self.progress_budget: dict[str, Any] | None = None
        self.history: list[tuple[int, float]] = []
        self._run: RunState | None = None
        self._run_agents: list[Agent] = []
        self._run_callbacks: list[Any] = []  # their state_dict() travels in run checkpoints
        self._run_learners: list[Any] = []

    # ------------------------------------------------------------------ run settings
    @property
    def batch_size(self) -> int:
        """Rows per gradient step, summed over the ranks of a distributed run (``RunSettings`` owns it)."""
        return self.settings.batch_size

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        if self.settings.running:  # during a run, the one path: applied by the run loop between rounds
            self.request(batch_size=value)
        else:
            self.settings.batch_size = self.settings.checked_batch_size(value)

    @property
    def update_freq(self) -> int:
        """Env steps per collection chunk (``RunSettings`` owns it)."""
        return self.settings.update_freq

    @update_freq.setter
    def update_freq(self, value: int) -> None:
        if self.settings.running:
            self.request(update_freq=value)
        else:
            self.settings.update_freq = count("update_freq", value, maximum=MAX_COUNT)

    def request(self, *, batch_size: int | None = None, update_freq: int | None = None,
                learning_rate: float | Mapping[str, float] | None = None,
                hyperparameters: Mapping[str, float] | None = None, agent: Any = None) -> None:
        """Ask for a change of the run's settings, applied by the run loop between collection and update.

        For callbacks and hooks during ``train()``: ``batch_size`` and ``update_freq`` (the trainer's),
        ``learning_rate`` (one rate for every optimiser of ``agent``, or ``{optimizer: rate}`` with names
        from ``agent.learning_rates()``) and ``hyperparameters`` (``{name: value}``, names from
        ``agent.hyperparameters()``); ``agent`` is one of :attr:`learners` (default: the run's only
        learner). Everything is checked now: an unknown name or a bad value raises, naming it, and
        nothing is queued. Pending changes are applied after the next ``on_collect_end`` (before that
        chunk's updates; requests of ``on_train_begin`` before the first chunk), the last request of a
        setting winning; in a distributed run rank 0's changes reach every rank. Each change is logged
        once (:mod:`marl_note.trainers.settings`). Writing ``trainer.batch_size`` or ``update_freq``
        during a run is the same request.

        Example:
            >>> from marl_note.agents.torch import DQN
            >>> trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=1, num_test_envs=1, update_freq=20,
            ...                                episodes_per_train=2, test_freq=2, episodes_per_test=1, seed=0)
            >>> dqn = DQN(trainer.observation_space("agent_0"), trainer.action_space("agent_0"), seed=0)
            >>> class Bigger:
            ...     def on_collect_end(self, trainer, stats, episodes):
            ...         trainer.request(batch_size=32)
            >>> stats = trainer.train([dqn], learning_mask=[1], callbacks=[Bigger()], plot=False, progress=False)
            >>> trainer.batch_size, stats["setting_changes"][0]["setting"], stats["setting_changes"][0]["new"]
            (32, 'batch_size', 32.0)
        """
        self.settings.request(batch_size=batch_size, update_freq=update_freq, learning_rate=learning_rate,
                              hyperparameters=hyperparameters, agent=agent)

    def limit_collection(self, limit: Callable[[str, int], bool], *, env_steps: int | None = None,
                         minutes: float | None = None) -> None:
        """Give this ``train()`` a collection limit (for a callback's ``on_train_begin``, as
        :class:`~marl_note.trainers.Budget` does).

        ``limit(kind, env_steps)`` is asked after every step of the envs in a training chunk (``kind``
        ``"train"``) and in a test (``"test"``), with the env steps of that collection so far, and True
        ends that collection early (a test then reports the episodes it finished); it is also asked
        before every gradient step of the learners' updates (``"update"``, ``env_steps`` 0; not in a
        distributed run), and True ends that update. So a budget holds inside a long chunk, test or
        update (an actor pool's learner asks it after every round report and every 50 ms of its wait
        for one, with the env steps reported). ``env_steps`` / ``minutes``
        (either None) are what the progress display counts against: whichever is estimated to end the
        run first. Both are dropped when ``train()`` returns.
        """
        if not callable(limit):
            raise TypeError(f"limit_collection(limit) takes a function limit(kind, env_steps) -> bool, got {limit!r}")
        self.collect_limit = limit
        self.progress_budget = {"env_steps": env_steps, "minutes": minutes}

    # ------------------------------------------------------------------ spaces
    @property
    def possible_agents(self) -> list[str]:
        return list(self.spec.possible_agents)

    @property
    def learners(self) -> list[Any]:
        """The distinct learning agents of the current (or last) run, in seat order: each is updated
        once per chunk (a joint learner stands for its seats); empty before the first ``train``."""
        return list(self._run_learners)

    @property
    def run_state(self) -> RunState | None:
        """The counters of the current (or last) run (``env_steps``, ``episodes``, ``updates``,
        ``history``, recorded ``series``, ...); None before the first ``train()``. Read them; the
        trainer writes them."""
        return self._run

    @property
    def run_agents(self) -> dict[str, Agent]:
        """``{seat: agent}`` of the current (or last) ``train()``, in ``spec.possible_agents`` order (one
        agent may hold several seats); empty before the first ``train()``. Callbacks read it (e.g. to
        evaluate the policy being trained)."""
        return dict(zip(self.spec.possible_agents, self._run_agents))

    def observation_space(self, agent: str):
        return self.spec.observation_space(agent)

    def action_space(self, agent: str):
        return self.spec.action_space(agent)

    def _metric(self, rewards: np.ndarray, learn: list[bool]) -> float:
        if not len(rewards):  # a budget ended the test before any episode did
            return float("nan")
        if self.reward_metric is not None:
            return metric_value(self.reward_metric(rewards))
        return float(rewards[:, np.flatnonzero(learn)].mean())

    def train_envs(self, state: bool = False) -> Any:
        """The vector env of the train envs (built on first use, rebuilt if a failure closed it).

        ``state=True``: its results carry the env's global state (for a joint learner; only where
        ``spec.state_space`` is not None), rebuilding envs that were built without it.
        """
        state = state and self.spec.state_space is not None
        venv = self._train_venv
        if venv is None or not self._usable(venv) or (state and not venv.state):
            if venv is not None:
                venv.close()
            self._train_venv = self._venv(self.num_train_envs, state)
        return self._train_venv

    def _venv(self, n: int, state: bool = False):
        fns = [self.env_fn] * n
        if self.processes is not None:
            return SubprocVectorEnv(fns, processes=self.processes, shared_memory=self.shared_memory,
                                    timeout=self.step_timeout, state=state)
        return SyncVectorEnv(fns, state=state)

    @staticmethod
    def _usable(venv: Any) -> bool:
        """A vector env that a timeout or a dead worker has closed is rebuilt on the next use."""
        return venv is not None and not getattr(venv, "closed", False)

    # ------------------------------------------------------------------ test
    def test(self, agents: Seats, episodes: int | None = None,
             learning_mask: Sequence[int] | None = None) -> dict[str, Any]:
        """Play ``episodes`` greedy episodes (no exploration, no learning) on the test envs."""
        seats = check_seats(self.spec, agents)
        episodes = self.episodes_per_test if episodes is None else positive_int("episodes", episodes)
        learn = ([True] * len(seats) if learning_mask is None
                 else seat_flags(self.spec, learning_mask, "learning_mask"))
        if not self._usable(self._test_venv):
            self._test_venv = self._venv(self.num_test_envs)
        col = Collector(self._test_venv, self.spec, seats, explore=[False] * len(seats), learn=[False] * len(seats),
                        check_finite=self.check_finite)
        col.reset(seed=None if self.seed is None else self.seed + 100_000 + len(self.history) * self.num_test_envs)
        limit = self.collect_limit
        stats = col.collect(n_episodes=episodes, stop=None if limit is None else lambda steps: limit("test", steps))
        rewards = stats.returns_array(self.spec.num_agents)
        return {"rewards": rewards, "reward": self._metric(rewards, learn),
                "reward_std": float(rewards.mean(axis=1).std()) if len(rewards) else float("nan"),
                "mean_num_steps": float(np.mean(stats.lengths)) if stats.lengths else float("nan"),
                "num_collected_steps": stats.env_steps,
                "num_collected_agent_steps": stats.agent_steps, "num_collected_episodes": stats.episodes}

    def test_against(self, agent: Agent, opponent: Any = None, episodes: int | None = None) -> dict[str, Any]:
        """Greedy games of ``agent`` in each seat in turn against a fixed ``opponent`` in the others.

        ``opponent``: an agent (the same in every other seat), a ``{seat: agent}`` dict, or None for
        a random legal-move player. ``episodes`` (default ``episodes_per_test``) are shared evenly
        over the seats. Returns ``reward`` (the metric: ``reward_metric`` per seat averaged, else
        the agent's mean return), ``per_seat`` (``{seat: {mean_return, win, draw, loss,
        episodes}}``, a win meaning a return above every other seat's), ``rewards``,
        ``learner_seat`` and the counters of :meth:`test`.
        """
        names = self.spec.possible_agents
        check_seats(self.spec, [agent] * len(names))
        opponents = baseline_opponents(self.spec, opponent, seed=None if self.seed is None else self.seed + 55_555)
        check_seats(self.spec, [opponents[a] for a in names])
        episodes = self.episodes_per_test if episodes is None else positive_int("episodes", episodes)
        return evaluate_against(self, agent, opponents, episodes)

    # ------------------------------------------------------------------ train
    def train(self, agents: Seats, learning_mask: Sequence[int] | Mapping[str, int],
              exploration_mask: Sequence[int] | None = None, plot: bool = True, progress: bool = True,
              test_agents: Seats | None = None, matchmaker: Callable | None = None,
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
        the Keras-style events ``on_train_begin(trainer)``, ``on_episode_begin(trainer, episode,
        logs)``, ``on_episode_end(trainer, episode, logs)`` (``logs``: ``returns``, ``length``,
        ``env_index``, ``reward``, ``tag``), ``on_collect_end(trainer, stats, episodes)``,
        ``on_batch_begin(trainer, batch, logs)`` / ``on_batch_end(trainer, batch, metrics)`` around
        each learner update, ``on_update_end(trainer, metrics, episodes)``, ``on_test_end(trainer,
        result, episodes)``, ``on_train_end(trainer, stats)`` (which may add keys to the returned
        statistics) and ``plot_series() -> {label: [(episodes, value), ...]}`` (drawn on the plot);
        one with none of them, or with an unknown ``on_...`` method, is refused before training
        starts (:mod:`marl_note.trainers.callbacks`: also ``LambdaCallback`` and ``EarlyStopping``;
        :mod:`marl_note.trainers.logging`: ``TensorBoard`` and ``CSVLogger``). A callback or hook
        that sets ``trainer.stop_training = True`` ends training after the current chunk (a test
        then runs if that chunk had none); it is reset at the start of each ``train()`` and
        reported as ``stopped_by_stop_training`` in the returned statistics. A budget (env steps, minutes) is
        the callback :class:`~marl_note.trainers.Budget`; a callback of your own may call
        :meth:`limit_collection` in ``on_train_begin`` the same way.
        ``checkpoint_path`` saves the whole run there (atomically) after every test and at the end;
        it must be a new or empty directory, one holding a previous checkpoint (other files there,
        such as plots, are kept) or a ``.zip`` path; anything else is refused before training starts.
        ``resume_from`` continues a saved run with the same agents (their states, replay buffers,
        counters and history are loaded; episodes in flight when it was saved start afresh).
        ``plot`` draws one figure of the run at the end to ``plot_path`` (``stats["plot_path"]``): test
        metric, training reward, losses, exploration rates, batch size and other knobs, callbacks'
        ``plot_series()`` (Elo). The run records them anyway (:mod:`marl_note.trainers.series`,
        ``trainer.run_state``); :mod:`marl_note.trainers.plot`'s ``visualize_*(trainer)`` draw them.
        """
        self.threads_in_effect, restore_threads = use_threads(self.threads)
        try:
            session = self._prepare(agents, learning_mask, exploration_mask, test_agents, matchmaker, callbacks,
                                    checkpoint_path, resume_from, baseline)
            session.loop(progress)
            return session.summarise(plot)
        finally:
            self.settings.stop()
            restore_threads()
            self.collect_limit = None  # a budget's limit belongs to its train()
            self.progress_budget = None

    def _prepare(self, agents: Seats, learning_mask: Any, exploration_mask: Any, test_agents: Seats | None,
                 matchmaker: Callable | None, callbacks: Sequence[Any], checkpoint_path: str | None,
                 resume_from: str | None, baseline: Any) -> RunLoop:
        """Check every argument (before any work), load a resumed run, seat the train collector."""
        seats = check_seats(self.spec, agents)
        test_seats = seats if test_agents is None else check_seats(self.spec, test_agents)
        learn = seat_flags(self.spec, learning_mask, "learning_mask")
        explore = learn if exploration_mask is None else seat_flags(self.spec, exploration_mask, "exploration_mask")
        check_learners(self.spec, seats, learn)
        if checkpoint_path is not None:
            check_checkpoint_target(checkpoint_path)  # a foreign directory is refused before any work
        if matchmaker is not None and not callable(matchmaker):
            raise TypeError(f"matchmaker must be callable, got {type(matchmaker).__name__}")
        self.source.check(self, matchmaker)
        callback_list = CallbackList(callbacks)
        chief = self.distributed.is_chief
        if not chief:  # checked on every rank, fired on rank 0 alone
            callback_list = CallbackList(())
        opponents = None
        if baseline is not None:
            opponents = baseline_opponents(self.spec, None if isinstance(baseline, str) else baseline,
                                           seed=None if self.seed is None else self.seed + 55_555)
            if isinstance(baseline, str) and baseline != "auto":
                raise ValueError(f"baseline must be 'auto', None, an agent or a {{seat: agent}} dict; got {baseline!r}")
            check_seats(self.spec, [opponents[a] for a in self.spec.possible_agents])
        run = RunState(next_test=self.test_freq)
        if resume_from is not None:
            run = load_run(resume_from, seats, callback_list.callbacks)  # checks everything before loading
            if run.episodes >= self.episodes_per_train:
                warnings.warn(f"resume_from={resume_from!r} has already collected {run.episodes} training episodes, "
                              f"the whole budget of episodes_per_train={self.episodes_per_train}: this train() "
                              f"collects nothing more (raise episodes_per_train to go on training)", stacklevel=3)
        self.collect_limit = None  # a callback's on_train_begin may set it (a budget)
        self.progress_budget = None
        self._run, self._run_agents, self._run_callbacks = run, seats, callback_list.callbacks
        self._run_learners = distinct([a for a, ln in zip(seats, learn) if ln])
        self.settings.start(self._run_learners, learner_labels(self.spec.possible_agents, seats, learn,
                                                               self._run_learners, lambda seat: seat))
        self.history = run.history
        session = RunLoop(self, seats, test_seats, learn, explore, callback_list, run, baseline, opponents,
                          test_agents_given=test_agents is not None,
                          checkpoint_path=checkpoint_path if chief else None, source=self.source)
        self.stop_training = False
        callback_list.fire("on_train_begin", self)
        events = EpisodeEvents(callback_list, self, run.episodes, lambda returns: self._metric(returns[None], learn))
        seed = self.seed if resume_from is None else _resume_seed(self.seed, run)
        learners = session.learners = self.source.start(self, seats, learn, explore, seed, events, matchmaker)
        session.recorder = Recorder(run.series, learner_labels(self.spec.possible_agents, seats, learn,
                                                               learners, learner_of))
        return session

    def save_checkpoint(self, path: str, include_replay: bool = True) -> str:
        """Save the current (or last) run: every distinct agent's state, replay, counters, history.

        Resume it with ``train(same agents, ..., resume_from=path)``.
        """
        if self._run is None:
            raise RuntimeError("no run to checkpoint yet: call train() first")
        settings = {"episodes_per_train": self.episodes_per_train, "update_freq": self.update_freq,
                    "test_freq": self.test_freq, "batch_size": self.batch_size, "seed": self.seed,
                    "possible_agents": list(self.spec.possible_agents)}
        return save_run(path, self._run, self._run_agents, settings, include_replay=include_replay,
                        callbacks=self._run_callbacks)

    def close(self) -> None:
        for venv in (self._train_venv, self._test_venv):
            if venv is not None:
                venv.close()
        self._train_venv = self._test_venv = None


def _env_name(env: Any) -> str | None:
    """The env's id as it names itself: a Gymnasium ``spec.id`` or PettingZoo's ``metadata["name"]``."""
    env_id = getattr(getattr(env, "spec", None), "id", None)
    if isinstance(env_id, str):
        return env_id
    metadata = getattr(env, "metadata", None)
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else None
