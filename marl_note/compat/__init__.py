"""The original library's names and workflow, on top of the core.

- :mod:`marl_note.compat.torch` / :mod:`marl_note.compat.tf`: every built-in agent with ``set()``,
  ``train()``, ``visualize_*`` and ``animate_agent`` (:class:`~marl_note.compat.workflow.Workflow`),
  and ``RL``, the subclassing base of the original library (:mod:`marl_note.compat.rl`);
- :mod:`marl_note.compat.set_options` / :mod:`~marl_note.compat.rebuild`: what each original ``set()``
  argument means for each agent;
- :mod:`marl_note.compat.facade`: ``agent.train()`` as a thin layer over the trainer;
- :mod:`marl_note.compat.animate`, :mod:`marl_note.compat.visualize`: the original plots and GIFs;
- :mod:`marl_note.compat.triplet`: triplet replay (``TRL=True``).

The core never imports this package.
"""
