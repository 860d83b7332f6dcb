"""Optional parts that plug into the core through its public seams; the core never imports them.

- :mod:`marl_note.contrib.pool`: the actor pool (actor processes collecting into shared-memory
  shards while the learner trains), an experience source of the trainer;
- :mod:`marl_note.contrib.distributed`: launching multi-process runs and the rank contexts of
  ``torch.distributed`` and ``tf.distribute`` (the trainer knows only ranks);
- :mod:`marl_note.contrib.adaptive`: adaptive batch size and hyperparameters, a trainer callback;
- :mod:`marl_note.contrib.finders`: learning-rate and optimiser finders;
- :mod:`marl_note.contrib.alphazero` and :mod:`marl_note.contrib.board_games`: AlphaZero (PUCT search
  with a policy/value network) and search players for classic board games.
"""
