"""The KV model iobench and the replay share: turns in whole pages, the tiered baseline's
eviction-ordered buckets. Imports ``traces`` only."""
