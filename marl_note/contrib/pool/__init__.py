"""The pool trainer: actor processes collect into shared-memory shards while the learner trains.

``DecentralizedTrainer(env, ..., source=ActorPool(actors=N, sync_every=K, **shard_options))`` turns
it on. The pieces:

- :mod:`~marl_note.contrib.pool.options`: :class:`PoolOptions`, the settings and shard options;
- :mod:`~marl_note.contrib.pool.shell`: the framework-free acting copy of an agent an actor uses;
- :mod:`~marl_note.contrib.pool.board`: :class:`WeightBoard`, versioned arrays in shared memory;
- :mod:`~marl_note.contrib.pool.actor`: the actor process (collector, shard writes, rounds);
- :mod:`~marl_note.contrib.pool.pool`: :class:`Pool`, the learner's side (start, drain, publish, close);
- :mod:`~marl_note.contrib.pool.source`: :class:`ActorPool`, the trainer's experience source over the pool;
- :mod:`~marl_note.contrib.pool.league`: self-play, an ``OpponentPool`` matchmaker run by the actors.

The shards themselves are :class:`~marl_note.replay.shared.SharedRing` s.
"""
from marl_note.contrib.pool.board import WeightBoard
from marl_note.contrib.pool.options import PoolOptions
from marl_note.contrib.pool.pool import ActorError
from marl_note.contrib.pool.source import ActorPool

__all__ = ["ActorError", "ActorPool", "PoolOptions", "WeightBoard"]
