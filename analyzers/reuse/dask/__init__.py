"""The Dask engine's modules (``fcctl analyze --engine dask``);
:mod:`fcctl.analyzers.reuse.dask_engine` describes the engine and names their public names.

:mod:`~fcctl.analyzers.reuse.dask.cluster` starts or connects to the cluster;
:mod:`~fcctl.analyzers.reuse.dask.parts` reads the dataset's parts on the workers;
:mod:`~fcctl.analyzers.reuse.dask.room` sizes the tasks to the workers' memory;
:mod:`~fcctl.analyzers.reuse.dask.shuffle` runs the block shuffle and the block passes;
:mod:`~fcctl.analyzers.reuse.dask.failures` words a failure of the cluster;
:mod:`~fcctl.analyzers.reuse.dask.analysis` runs the analysis and assembles its result.

Nothing is imported here: a local cluster's workers import
:mod:`~fcctl.analyzers.reuse.dask.cluster` as they start (its ``dask_setup``).
"""
