"""Capacity planning: sweeps over scenario settings with replications and confidence
intervals, and searches for the smallest (or largest) setting that meets a target.

* ``simmodel.capacity.sweep(path)`` -> ``SweepResult`` (``.points``, ``.summary``);
* ``simmodel.capacity.search(path)`` -> ``SearchResult`` (``.results``, ``.answers``,
  ``.probes``);

both on local processes by default, any ``concurrent.futures.Executor`` or a
``dask.distributed.Client``, resumable through their output folder.  File format:
docs/sweep.md.  Modules: ``spec`` (files -> points), ``keys`` (dotted scenario keys),
``runner`` (one run in a worker), ``executors``, ``store`` (cache, atomic tables),
``stats`` (verdicts, Student-t intervals), ``sweep``, ``search``, ``report`` (tables
printed at the end); the command line is ``simmodel.cli_capacity``.
"""
from simmodel.capacity.search import Bisector, SearchResult, search
from simmodel.capacity.spec import Spec, load_spec
from simmodel.capacity.sweep import SweepResult, sweep

__all__ = ["Bisector", "SearchResult", "Spec", "SweepResult", "load_spec", "search", "sweep"]
