"""Learning-rate and optimiser finders: short trial runs that pick a learning rate or an optimiser.

:class:`LRFinder` and :class:`OptFinder` (:mod:`~marl_note.contrib.finders.finders`), with the
search pieces in :mod:`~marl_note.contrib.finders.parts`, the results in
:mod:`~marl_note.contrib.finders.results` and :class:`ParallelFinder` (trials in worker processes)
in :mod:`~marl_note.contrib.finders.parallel`.
"""
from marl_note.contrib.finders.finders import LRFinder, OptFinder
from marl_note.contrib.finders.parallel import ParallelFinder

__all__ = ["LRFinder", "OptFinder", "ParallelFinder"]
