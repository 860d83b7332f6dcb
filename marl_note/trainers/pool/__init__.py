"""The pool trainer: actor processes collect into shared-memory shards while the learner trains.

``DecentralizedTrainer(env, ..., actors=N, sync_every=K, pool={...})`` turns it on. The pieces:

- :mod:`~marl_note.trainers.pool.options`: :class:`PoolOptions`, the settings and shard options;
- :mod:`~marl_note.trainers.pool.shell`: the framework-free acting copy of an agent an actor uses;
- :mod:`~marl_note.trainers.pool.board`: :class:`WeightBoard`, versioned arrays in shared memory;
- :mod:`~marl_note.trainers.pool.actor`: the actor process (collector, shard writes, rounds);
- :mod:`~marl_note.trainers.pool.pool`: :class:`Pool`, the learner's side (start, drain, publish, close);
- :mod:`~marl_note.trainers.pool.loop`: :class:`PoolRunLoop`, the training loop over the pool;
- :mod:`~marl_note.trainers.pool.league`: self-play, an ``OpponentPool`` matchmaker run by the actors.

The shards themselves are :class:`~marl_note.replay.shared.SharedRing` s.
"""
from marl_note.trainers.pool.board import WeightBoard
from marl_note.trainers.pool.loop import PoolRunLoop
from marl_note.trainers.pool.options import PoolOptions
from marl_note.trainers.pool.pool import ActorError, Pool

__all__ = ["ActorError", "Pool", "PoolOptions", "PoolRunLoop", "WeightBoard"]
