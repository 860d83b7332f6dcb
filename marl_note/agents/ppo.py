"""Proximal policy optimisation, the numpy half: configuration, acting, rollout, GAE and the epoch loop.

The backend networks (:mod:`marl_note.agents.torch.ppo`, :mod:`marl_note.agents.tf.ppo`) only
evaluate the actor-critic and take one clipped-objective step on a numpy minibatch. No act-time
extras are stored: collection never changes the network, so at the start of ``update()`` one
batched forward pass over the stored (obs, act) gives exactly the behaviour policy's
log-probabilities and the value estimates GAE needs.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from marl_note.agents.core import AgentCore
from marl_note.agents.encoders import ObsEncoder
from marl_note.agents.exploration.masked import masked_argmax, masked_softmax, sample_categorical
from marl_note.agents.networks import mlp_weights, torso_weights
from marl_note.agents.options import PriorityOptions, TorsoOptions
from marl_note.agents.schedule import updates_cut_short
from marl_note.agents.spaces import check_mask, check_transitions
from marl_note.replay import PrioritizedReplayBuffer, RolloutBuffer, compute_gae
from marl_note.types import Transitions
from marl_note.validation import non_negative_float, optional, positive_float, positive_int, unit_interval

if TYPE_CHECKING:
    from marl_note.agents.noise_scale import ReplaySignal

__all__ = ["PPOConfig", "PPOCore", "action_output"]

EVAL_ROWS = 4096  # rollout rows per forward pass of the update's GAE pass
_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


def action_output(action_space: gym.Space) -> tuple[bool, int]:
    """``(continuous, policy output size)`` for PPO's action space (Discrete or Box).

    Example:
        >>> action_output(gym.spaces.Box(-1, 1, (2, 3))), action_output(gym.spaces.Discrete(4))
        ((True, 6), (False, 4))
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return False, int(action_space.n)
    if isinstance(action_space, gym.spaces.Box):
        return True, int(np.prod(action_space.shape, dtype=np.int64))
    raise TypeError(f"PPO supports Discrete and Box action spaces, got {action_space!r}")


@dataclasses.dataclass(frozen=True)
class PPOConfig(PriorityOptions, TorsoOptions):
    """PPO's hyperparameters, defaults written once and checked once.

    The network and prioritized-sampling options are the groups of :mod:`marl_note.agents.options`
    (``alpha``, ``beta``, ``initial_td`` with ``prioritized=True``, see :class:`PPOCore`); the
    fields below are PPO's own, and the defaults where PPO differs from a group's.

    Example:
        >>> PPOConfig(n_steps=4).n_steps, PPOConfig().clip_range
        (4, 0.2)
        >>> PPOConfig(n_epochs=0)
        Traceback (most recent call last):
        ...
        ValueError: n_epochs must be a positive integer (passes over each rollout), got 0
    """

    activation: str = "tanh"
    shared: bool = False
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    n_epochs: int = 10
    n_steps: int = 2048
    max_grad_norm: float | None = 0.5
    normalize_advantage: bool = True
    deterministic_eval: bool = True
    target_kl: float | None = None
    log_std_init: float = 0.0
    lambda_: float = 0.5
    initial_ratio: float = 1.0

    def _check(self) -> None:
        put = self._put
        for name in ("shared", "normalize_advantage", "deterministic_eval"):
            put(name, bool(getattr(self, name)))
        put("lr", positive_float("lr", self.lr, "the Adam learning rate"))
        put("gamma", unit_interval("gamma", self.gamma, "the discount"))
        put("gae_lambda", unit_interval("gae_lambda", self.gae_lambda, "GAE's lambda"))
        put("clip_range", positive_float("clip_range", self.clip_range, "the ratio's clip range"))
        put("ent_coef", non_negative_float("ent_coef", self.ent_coef, "the entropy bonus weight"))
        put("vf_coef", non_negative_float("vf_coef", self.vf_coef, "the value loss weight"))
        put("n_epochs", positive_int("n_epochs", self.n_epochs, "passes over each rollout"))
        put("n_steps", positive_int("n_steps", self.n_steps, "transitions per rollout"))
        put("max_grad_norm", optional(positive_float, "max_grad_norm", self.max_grad_norm))
        put("target_kl", optional(positive_float, "target_kl", self.target_kl))
        log_std = float(self.log_std_init)
        if not math.isfinite(log_std):
            raise ValueError(f"log_std_init must be a finite number, got {self.log_std_init!r}")
        put("log_std_init", log_std)
        put("lambda_", unit_interval("lambda_", self.lambda_, "the weight of |TD| against |ratio - 1| in the priority"))
        put("initial_ratio", non_negative_float("initial_ratio", self.initial_ratio))
        if self.initial_priority <= 0:
            raise ValueError("the initial priority lambda_ * initial_td + (1 - lambda_) * initial_ratio must be > 0")

    @property
    def initial_priority(self) -> float:
        return self.lambda_ * self.initial_td + (1.0 - self.lambda_) * self.initial_ratio


class PPOCore(AgentCore):
    """PPO with a clipped surrogate, GAE(lambda), advantage normalisation and gradient clipping.

    Discrete actions use a masked categorical (illegal logits are ``-inf``; exploring samples,
    ``explore=False`` takes the best legal logit). Box actions use a diagonal Gaussian with a
    state-independent log-std; ``act`` returns the raw sample (the caller clips to the bounds).
    ``deterministic_eval=False`` samples from the policy in ``explore=False`` calls too (tests and
    evaluation play the stochastic policy that PPO learned, as Tianshou's PPO does by default):
    for Gaussian actions clipped to their bounds, and in multi-agent games where a deterministic
    policy gets stuck, the mean or arg-max action can play much worse than the policy itself.
    ``update(batch_size)`` does nothing until ``n_steps`` transitions are stored, then runs
    ``n_epochs`` passes of minibatches of ``batch_size`` over all of them and clears the rollout;
    ``target_kl`` stops after an epoch whose mean approximate KL exceeds ``1.5 * target_kl``.
    Weights are orthogonal (gain sqrt(2) hidden, 0.01 policy head, 1 value head), drawn in numpy
    so both backends start from the same ones. ``compile=True`` compiles the minibatch step
    (``torch.compile``, eager with a warning where that fails; XLA in TensorFlow).

    ``prioritized=True`` draws each epoch's minibatches (as many as a plain epoch has) with replacement
    from a :class:`~marl_note.replay.PrioritizedReplayBuffer` over the rollout instead of a
    permutation: priorities ``lambda_ * |return - V(s)| + (1 - lambda_) * |ratio - 1|`` are fed
    back after every minibatch, items start at ``lambda_ * initial_td + (1 - lambda_) *
    initial_ratio``, ``alpha`` is the prioritization exponent and the importance weights'
    ``beta`` anneals linearly to 1 over 100k gradient steps; both loss terms are weighted.
    Acting goes through a numpy copy of the policy network and ``log_std``
    (:class:`~marl_note.agents.numpy_policy.NumpyPolicy`, refreshed after every weight change,
    equal to the framework's output to float32 rounding);
    ``numpy_acting=False`` acts through the framework instead.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from marl_note.agents.torch import PPO
        >>> from marl_note.types import Transitions
        >>> agent = PPO(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), n_steps=4, n_epochs=2, seed=0)
        >>> a = agent.act(np.zeros((4, 3)), explore=True)
        >>> agent.observe(Transitions(obs=np.zeros((4, 3)), act=a, rew=np.ones(4), next_obs=np.zeros((4, 3)),
        ...     terminated=np.array([0, 0, 0, 1], bool), truncated=np.zeros(4, bool), stream=np.zeros(4, int)))
        >>> agent.update(batch_size=2)["gradient_steps"]
        4
    """

    config_class = PPOConfig

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, config: PPOConfig | None = None,
                 seed: int | None = None, device: Any = "cpu", compile: bool = False, numpy_acting: bool = True,
                 **overrides: Any):
        self.continuous, self.out_dim = action_output(action_space)
        super().__init__(observation_space, action_space, seed=seed, device=device, compile=compile)
        self.cfg = self._resolve_config(config, overrides)
        self.encoder = ObsEncoder(observation_space, self.cfg.torso, self.cfg.conv_layers)
        self.cfg = dataclasses.replace(self.cfg, torso=self.encoder.torso, conv_layers=self.encoder.conv_layers or None)
        self.action_start = 0 if self.continuous else int(action_space.start)  # type: ignore[attr-defined]
        self.rollout = RolloutBuffer(self.encoder.store_space, action_space)  # Dict/Tuple stored flat
        self.nets = self.Networks(self._initial_weights(), self.cfg, self.continuous, device=self.device,
                                  compile=self.compile)
        actor = ("shared", "net") if self.cfg.shared else ("mlp", "net.pi")
        conv = ("net.conv",) if self.cfg.torso == "conv" else ()
        self._publish_numpy(numpy_acting, {"pi": actor}, self.cfg.activation,
                            (("net.log_std",) if self.continuous else ()) + conv, self.cfg.conv_layers, "net.conv")

    def __getattr__(self, name: str) -> Any:
        """The hyperparameters read as attributes too (``agent.gamma``, ``agent.n_steps``, ...)."""
        cfg = self.__dict__.get("cfg")
        if cfg is not None and name in PPOConfig.__dataclass_fields__:
            return getattr(cfg, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _initial_weights(self) -> dict[str, np.ndarray]:
        """``net.log_std`` (Box actions), ``net.trunk`` (shared), ``net.pi`` and ``net.v``, drawn from ``init_rng``."""
        cfg, rng = self.cfg, self.init_rng
        weights: dict[str, np.ndarray] = {}
        if self.continuous:
            weights["net.log_std"] = np.full(self.out_dim, cfg.log_std_init, np.float32)
        conv, dim = torso_weights("net", self.encoder, rng, "orthogonal")  # one conv torso under pi and v
        weights.update(conv)
        if cfg.shared:
            weights.update(mlp_weights("net.trunk", dim, cfg.hidden_sizes, None, rng, "orthogonal"))
            last = cfg.hidden_sizes[-1] if cfg.hidden_sizes else dim
            weights.update(mlp_weights("net.pi", last, (), self.out_dim, rng, "orthogonal", out_gain=0.01))
            weights.update(mlp_weights("net.v", last, (), 1, rng, "orthogonal", out_gain=1.0))
        else:
            weights.update(mlp_weights("net.pi", dim, cfg.hidden_sizes, self.out_dim, rng, "orthogonal",
                                       out_gain=0.01))
            weights.update(mlp_weights("net.v", dim, cfg.hidden_sizes, 1, rng, "orthogonal", out_gain=1.0))
        return weights

    # -- acting ------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = False) -> np.ndarray:
        x, policy = self.encoder(obs), self.numpy_policy()  # the numpy copy unless numpy_acting=False
        out = (self.nets.policy(x) if policy is None else policy.forward("pi", x)).astype(np.float64)
        explore = explore or not self.cfg.deterministic_eval
        if self.continuous:
            if explore:
                log_std = self.nets.log_std() if policy is None else policy.weights["net.log_std"]
                out = out + np.exp(log_std.astype(np.float64)) * self.rng.standard_normal(out.shape)
            return out.reshape((len(out), *self.action_space.shape)).astype(self.action_space.dtype)  # type: ignore[misc, arg-type]
        mask = check_mask(mask, len(out), self.out_dim)
        a = sample_categorical(masked_softmax(out, mask), self.rng) if explore else masked_argmax(out, mask)
        return a + self.action_start

    def policy_probs(self, obs: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """The policy's softmax over the legal actions ``[B, n]`` (what ``act(explore=True)`` samples);
        Discrete actions only. With ``deterministic_eval=True``, ``act(explore=False)`` takes its argmax."""
        if self.continuous:
            raise TypeError("policy_probs needs a Discrete action space; this PPO has Box actions")
        x, policy = self.encoder(obs), self.numpy_policy()
        out = (self.nets.policy(x) if policy is None else policy.forward("pi", x)).astype(np.float64)
        return masked_softmax(out, check_mask(mask, len(out), self.out_dim))

    def _act_array(self, act: Any) -> np.ndarray:
        act = np.asarray(act)
        if self.continuous:
            return act.reshape(len(act), -1).astype(np.float32)
        return act.astype(np.int64) - self.action_start

    def _mask_array(self, mask: Any, n: int) -> np.ndarray:
        """A bool ``[n, out_dim]`` mask: all legal without one (and always for Box actions)."""
        if mask is None or self.continuous:
            return np.ones((n, self.out_dim), bool)
        return check_mask(mask, n, self.out_dim)  # type: ignore[return-value]

    def log_prob(self, obs: np.ndarray, act: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Log-probabilities of ``act`` under the current policy (numpy in, numpy out)."""
        x = self.encoder(obs)
        return self.nets.evaluate(x, self._act_array(act), self._mask_array(mask, len(x)))[0]

    # -- storing -----------------------------------------------------------------------------------
    def observe(self, transitions: Transitions) -> None:
        transitions = self.encoder.flat_transitions(transitions)
        check_transitions(transitions, self.encoder)
        self.rollout.add(transitions)
        self.agent_steps += len(transitions)

    # -- learning ----------------------------------------------------------------------------------
    def update(self, batch_size: int) -> dict[str, Any]:
        """Train on the stored rollout once it holds ``n_steps`` transitions, then clear it."""
        cfg = self.cfg
        if len(self.rollout) < cfg.n_steps or updates_cut_short():  # (the budget ran out: not even the GAE pass)
            return {"gradient_steps": 0}
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        data = self.rollout.get()
        n = len(data)
        arrays = self._rollout_pass(data, stoppable=True)
        if arrays is None:  # the run's wall-time budget ran out during the pass over the rollout
            return {"gradient_steps": 0}
        x, act, mask, old_logp, adv, ret, values = arrays
        sums = np.zeros(len(_METRICS))
        steps = 0
        per = self._prioritized_rollout(data) if cfg.prioritized else None
        for _ in range(cfg.n_epochs):
            epoch_kl = []
            for idx, w in self._minibatches(n, batch_size, per):
                if updates_cut_short():  # the run's wall-time budget ran out
                    break
                a = adv[idx]
                if cfg.normalize_advantage and len(idx) > 1:
                    a = (a - a.mean()) / (a.std(ddof=1) + np.float32(1e-8))
                out = self.nets.train_step(x[idx], act[idx], mask[idx], old_logp[idx], a, ret[idx], w,
                                           who=type(self).__name__, update=self.updates + 1)
                self.updates += 1
                steps += 1
                log_ratio = np.asarray(out["log_ratio"], np.float64)
                ratio = np.exp(log_ratio)
                if per is not None:
                    per.update_priorities(idx, out["td"], ratios=ratio, lambda_=cfg.lambda_)
                kl = float(np.mean((ratio - 1.0) - log_ratio))
                epoch_kl.append(kl)
                sums += np.array([out["policy_loss"], out["value_loss"], out["entropy"], kl,
                                  np.mean(np.abs(ratio - 1.0) > cfg.clip_range)])
            if updates_cut_short() or (cfg.target_kl is not None and np.mean(epoch_kl) > 1.5 * cfg.target_kl):
                break
        self.rollout.clear()
        if not steps:
            return {"gradient_steps": 0}
        metrics: dict[str, Any] = {k: float(v) / steps for k, v in zip(_METRICS, sums, strict=True)}
        var = float(np.var(ret, ddof=1)) if n > 1 else float("nan")
        metrics["explained_variance"] = (float("nan") if not var or math.isnan(var)
                                         else 1.0 - float(np.var(ret - values, ddof=1)) / var)
        if per is not None:
            metrics["per_ess"] = per.effective_sample_size()
            metrics["per_beta"] = per.beta
        metrics["gradient_steps"] = steps
        return metrics

    def _rollout_arrays(self, data: Transitions) -> tuple[np.ndarray, ...]:
        """``(x, act, mask, old_logp, adv, ret, values)`` of a rollout under the current networks (GAE)."""
        arrays = self._rollout_pass(data, stoppable=False)
        assert arrays is not None  # only a stoppable pass stops
        return arrays

    def _rollout_pass(self, data: Transitions, stoppable: bool) -> tuple[np.ndarray, ...] | None:
        """:meth:`_rollout_arrays`, the networks seeing the rollout :data:`EVAL_ROWS` rows at a time (a pixel
        rollout in one pass can take tens of seconds and gigabytes); ``stoppable``: None if
        :func:`updates_cut_short` between two of them."""
        x = self.encoder(data.obs)
        next_x = self.encoder(data.next_obs, "next_obs")
        act, mask = self._act_array(data.act), self._mask_array(data.mask, len(x))
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start in range(0, len(x), EVAL_ROWS):
            if stoppable and updates_cut_short():
                return None
            rows = slice(start, start + EVAL_ROWS)
            parts.append((*self.nets.evaluate(x[rows], act[rows], mask[rows]), self.nets.values(next_x[rows])))
        old_logp, values, next_values = (np.concatenate(p) for p in zip(*parts))
        adv, ret = compute_gae(data.rew, values, next_values, data.terminated, data.truncated, data.stream,
                               self.cfg.gamma, self.cfg.gae_lambda)
        return x, act, mask, old_logp, adv, ret, values

    @property
    def local_kl_stop(self) -> bool:
        """True with ``target_kl``: each replica of a distributed run would end its epochs on its own KL."""
        return self.cfg.target_kl is not None

    def _config_knobs(self) -> tuple[str, ...]:
        return ("clip_range", "gamma", "alpha", "beta") if self.cfg.prioritized else ("clip_range", "gamma")

    # -- gradient noise scale ----------------------------------------------------------------------
    def _minibatch_grad_sq(self, arrays: tuple[np.ndarray, ...], idx: np.ndarray) -> float:
        x, act, mask, old_logp, adv, ret = (a[idx] for a in arrays[:6])
        if self.cfg.normalize_advantage and len(idx) > 1:
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + np.float32(1e-8))
        return float(self.nets.grad_sq_norm(x, act, mask, old_logp, adv, ret, np.ones(len(idx), np.float32)))

    def _grad_sq_norm(self, batch: Transitions) -> float:
        """``|G_B|^2`` of the clipped surrogate + value loss (+ entropy bonus) of one minibatch holding
        all of ``batch``, a rollout in arrival order (GAE runs over it), at the first step of an update
        (old policy = current, ratio 1), over the actor-critic's parameters, unclipped. Nothing changes."""
        arrays = self._rollout_arrays(batch)
        return self._minibatch_grad_sq(arrays, np.arange(len(batch)))

    def _noise_passes(self, b_small: int, b_big: int, rng: np.random.Generator) -> Any:
        """The noise scale of the stored rollout's minibatch gradients: GAE over the rollout once, then
        two independent minibatches of ``b_small`` and ``b_big`` rows (without replacement, drawn by
        ``rng``) at the first step of an update; None while the rollout holds fewer than ``b_big`` rows."""
        if len(self.rollout) < b_big:
            return None
        arrays = self._rollout_arrays(self.rollout.get())
        n = len(arrays[0])
        rows_small, rows_big = rng.choice(n, int(b_small), replace=False), rng.choice(n, int(b_big), replace=False)
        return ((lambda: self._minibatch_grad_sq(arrays, rows_small)),
                (lambda: self._minibatch_grad_sq(arrays, rows_big)))

    def _noise_ready(self) -> bool:
        """Only when an update follows: a full rollout (of at least 16 rows)."""
        return len(self.rollout) >= self.cfg.n_steps and len(self.rollout) >= 16

    def _noise_rows(self) -> int:
        return len(self.rollout)

    def _replay_signal(self) -> ReplaySignal:
        from marl_note.agents.noise_scale import ReplaySignal  # the rollout's ESS arrives with the update metrics

        return ReplaySignal(capacity=int(self.cfg.n_steps))

    # -- minibatches -------------------------------------------------------------------------------
    def _prioritized_rollout(self, data: Transitions) -> PrioritizedReplayBuffer:
        """A prioritized buffer holding this rollout in order (storage index == row)."""
        cfg = self.cfg
        beta = cfg.beta + (1.0 - cfg.beta) * min(1.0, self.updates / 100_000)
        per = PrioritizedReplayBuffer(len(data), self.observation_space, self.action_space, alpha=cfg.alpha,
                                      beta=beta, beta_final=beta, beta_annealing_steps=0,
                                      initial_TD=cfg.initial_priority, seed=int(self.rng.integers(0, 2**63 - 1)))
        per.add(data)
        return per

    def _minibatches(self, n: int, batch_size: int, per: PrioritizedReplayBuffer | None
                     ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(indices, importance weights)`` for one epoch (weights are ones without ``prioritized``)."""
        if per is None:
            perm = self.rng.permutation(n)
            for start in range(0, n, batch_size):
                idx = perm[start:start + batch_size]
                yield idx, np.ones(len(idx), np.float32)
            return
        for _ in range(-(-n // batch_size)):
            b = per.sample(batch_size)
            yield np.asarray(b.indices), np.asarray(b.weights, np.float32)

    def __repr__(self) -> str:
        kind = "gaussian" if self.continuous else "categorical"
        return (f"PPO(obs_dim={self.encoder.dim}, {kind}[{self.out_dim}], agent_steps={self.agent_steps}, "
                f"updates={self.updates})")
