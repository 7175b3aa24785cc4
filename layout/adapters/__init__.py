"""Engine adapters: thin modules over the storage core, one per engine.

* :mod:`.lmcache`: an LMCache 0.5.6 in-process storage plugin (``StoragePluginInterface``);
* :mod:`.sglang`: an SGLang HiCache L3 backend (``HiCacheStorage``, ``--hicache-storage-backend
  dynamic``);
* :mod:`.vllm`: a vLLM ``OffloadingSpec`` (``spec_module_path``): scheduler-side manager and
  worker-side transfer worker;
* :mod:`.common`: what they share (block keys to sessions, the write-time rule's fallback,
  placement, FC-CIO writes through ``FlatStore``, coalesced restores), and :mod:`.trace`
  (``FLATCAKE_TRACE`` capture).

Only the engine modules import an engine package, each when it is imported itself; this
``__init__`` imports none of them, and the core's own ``__init__`` never imports this package,
so the core still imports with numpy alone.
"""
