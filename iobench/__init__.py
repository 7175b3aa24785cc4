"""iobench: measure flat per-session KV files against the eviction-ordered baseline on a real disk.

Library entry point: :func:`fcctl.iobench.run.run_iobench` with an
:class:`fcctl.iobench.config.IobenchConfig`; it returns an
:class:`fcctl.iobench.result.IobenchResult`. Modules: ``config`` (the knobs), ``workload``
(sessions and KV geometry), ``layouts`` (the layout protocol and registry: ``flat``,
``eviction``), ``restore`` (cold restores, verified), ``fio_reference`` (fio beside them),
``result`` (the typed result and its comparisons), ``run`` (the steps of a run), ``sizing``
(disk and memory a workload needs, checked before anything is built), ``safety`` (the run
directory, its owner lock, free space, cleanup that signals cannot cut short), ``fio`` (fio in
its own process group, terminated and reaped on interrupt).
"""
