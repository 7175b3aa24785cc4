"""The adapters' two monitors (``layout/adapters/metrics.py``): counts kept by a real store as an
engine drives it, ``stats()`` without any dependency, and a Prometheus text scrape
(``prometheus_client.generate_latest`` on a fresh registry) in the engine's naming style, from
SessionKV and from the LMCache plugin driven through LMCache's own calls."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from report_helpers import fcctl

from fcctl.layout.adapters.common import SessionKV, StoreOptions
from fcctl.layout.adapters.metrics import AdapterMetrics, Histogram, register_if_available
from fcctl.layout.placement import PlacementRule
from fcctl.reports.monitors import read_monitors

LAYERS, PAGE = 2, 512


def _kv(tmp_path: Path, engine: str = "sglang") -> SessionKV:
    return SessionKV(
        StoreOptions(str(tmp_path / "kv"), host_bytes=0, ssd_bytes=1 << 26),
        engine=engine,
        layers=LAYERS,
        layer_page_bytes=PAGE,
        tokens_per_key=16,
        rule=PlacementRule(100, 10_000),
    )


def _pages(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, LAYERS, PAGE), dtype=np.uint8)


def _drive(kv: SessionKV) -> None:
    """Two turns of one session, lookups, two loads (one a miss), one eviction."""
    keys = [f"k{i}" for i in range(5)]
    kv.write(keys[:3], _pages(3, 1), session_id="chat")
    kv.write(keys[3:], _pages(2, 2), prefix=keys[:3], session_id="chat")
    assert kv.lookup(keys) == 5 and kv.lookup(["k0", "nope"]) == 1
    assert kv.read(keys) is not None
    assert kv.read(["k1", "nope"]) is None
    assert kv.evict_session("chat") == keys


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram([1, 5])
    for v in (0.5, 1, 3, 7):
        h.observe(v)
    assert h.cumulative() == [("1.0", 2), ("5.0", 3), ("+Inf", 4)] and h.count == 4
    assert h.sum == 11.5


def test_stats_count_what_the_store_did(tmp_path: Path) -> None:
    kv = _kv(tmp_path)
    _drive(kv)
    s = kv.stats()
    assert s["blocks_looked_up"] == 7 and s["blocks_hit"] == 6
    assert s["loads"] == 2 and s["loads_failed"] == 1 and s["blocks_failed"] == 2
    assert s["blocks_delivered"] == 5 and s["delivered_hit_share"] == 5 / 7
    # Two SSD turns: 3 and 2 pages of 2 x 512 bytes; the load read both whole.
    assert s["bytes_written"] == 5 * LAYERS * PAGE and s["stores"] == 2
    assert s["bytes_read"] >= 5 * LAYERS * PAGE and s["stores_failed"] == 0
    assert s["sessions_reclaimed"] == 1 and s["stores_pending"] == 0
    assert s["segments_per_session"]["count"] == 2 and s["segments_per_session"]["sum"] == 3
    assert s["load_seconds"]["count"] == 1  # a failed load is counted, not timed
    kv.close(remove=True)
    with pytest.raises(ValueError, match="engine: a name like 'lmcache'"):
        AdapterMetrics("no good")
    if importlib.util.find_spec("prometheus_client") is None:
        # Without it the numbers stay in stats(); exporting says what to install.
        assert not register_if_available(AdapterMetrics("sglang"))
        with pytest.raises(ImportError, match=r"registry: .* pip install prometheus_client"):
            AdapterMetrics("sglang").register()


def _scrape(registry: Any) -> dict[str, float]:
    """Every sample of a Prometheus text scrape of ``registry``, by name and labels."""
    prometheus = pytest.importorskip("prometheus_client")
    parser = importlib.import_module("prometheus_client.parser")
    text = prometheus.generate_latest(registry).decode()
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return out


def test_prometheus_scrape_of_a_driven_store(tmp_path: Path) -> None:
    prometheus = pytest.importorskip("prometheus_client")
    kv = _kv(tmp_path, engine="sglang")
    registry = kv.metrics.register(prometheus.CollectorRegistry())
    _drive(kv)
    got = _scrape(registry)
    assert got["sglang:flatcake_blocks_looked_up_total"] == 7
    assert got["sglang:flatcake_blocks_hit_total"] == 6
    assert got["sglang:flatcake_blocks_delivered_total"] == 5
    assert got["sglang:flatcake_loads_failed_total"] == 1
    assert got["sglang:flatcake_loads_cancelled_total"] == 0
    assert got["sglang:flatcake_bytes_written_total"] == 5 * LAYERS * PAGE
    assert got["sglang:flatcake_sessions_reclaimed_total"] == 1
    assert got["sglang:flatcake_segments_per_session_count"] == 2
    assert got["sglang:flatcake_segments_per_session_bucket{le=1.0}"] == 1
    assert got["sglang:flatcake_segments_per_session_bucket{le=2.0}"] == 2
    assert got["sglang:flatcake_load_seconds_count"] == 1
    kv.close(remove=True)


def test_adapters_of_one_engine_are_summed_under_one_name(tmp_path: Path) -> None:
    prometheus = pytest.importorskip("prometheus_client")
    registry = prometheus.CollectorRegistry()
    ranks = [_kv(tmp_path / f"r{r}", engine="vllm") for r in range(2)]
    for kv in ranks:
        assert register_if_available(kv.metrics, registry)
        _drive(kv)
    got = _scrape(registry)
    assert got["vllm:flatcake_blocks_looked_up_total"] == 14
    assert got["vllm:flatcake_load_seconds_count"] == 2
    for kv in ranks:
        kv.close(remove=True)


def test_lmcache_plugin_scrape_through_lmcaches_calls(tmp_path: Path) -> None:
    prometheus = pytest.importorskip("prometheus_client")
    torch = pytest.importorskip("torch")
    try:
        adapter = importlib.import_module("fcctl.layout.adapters.lmcache")
        backends = importlib.import_module("lmcache.v1.storage_backend")
        config_mod = importlib.import_module("lmcache.v1.config")
        memory = importlib.import_module("lmcache.v1.memory_management")
        utils = importlib.import_module("lmcache.utils")
    except ImportError as e:
        pytest.skip(f"the LMCache adapter: import failed: {e}")
    chunk = 16
    extra = {
        "storage_plugin.flatcake.module_path": adapter.__name__,
        "storage_plugin.flatcake.class_name": "FlatCakeStoragePlugin",
        "flatcake.directory": str(tmp_path / "kv"),
        "flatcake.host_bytes": 0,
    }
    config = config_mod.LMCacheEngineConfig.from_defaults(
        chunk_size=chunk, local_cpu=False, storage_plugins=["flatcake"], extra_config=extra
    )
    loaded: OrderedDict = OrderedDict()
    loop = asyncio.new_event_loop()
    backends.storage_plugin_launcher(config, None, loop, None, "cpu", loaded)
    loop.close()
    plugin = loaded["flatcake"]
    keys = [
        utils.CacheEngineKey("m", 1, 0, 500 + i, torch.float16, {"lmcache.tag.session_id": "s"})
        for i in range(4)
    ]
    objs = []
    for i in range(4):
        data = torch.full((2, 3, chunk, 8), float(i)).half()
        raw = data.reshape(-1).view(torch.uint8).clone()
        meta = memory.MemoryObjMetadata(
            shape=data.shape,
            dtype=torch.float16,
            address=0,
            phy_size=raw.numel(),
            ref_count=1,
            fmt=memory.MemoryFormat.KV_2LTD,
        )
        objs.append(memory.TensorMemoryObj(raw, meta, None))
    assert plugin.batched_contains(keys) == 0
    plugin.batched_submit_put_task(keys, objs)
    assert plugin.kv.flush(timeout_s=60)
    registry = plugin.kv.metrics.register(prometheus.CollectorRegistry())
    assert plugin.batched_contains(keys) == 4
    got_objs = plugin.batched_get_blocking(
        [*keys, utils.CacheEngineKey("m", 1, 0, 9, torch.float16)]
    )
    assert got_objs[-1] is None and all(o is not None for o in got_objs[:4])
    got = _scrape(registry)
    assert got["lmcache:flatcake_blocks_looked_up_total"] == 8
    assert got["lmcache:flatcake_blocks_hit_total"] == 4
    assert got["lmcache:flatcake_blocks_delivered_total"] == 4
    assert got["lmcache:flatcake_stores_total"] == 1
    assert got["lmcache:flatcake_bytes_written_total"] == 4 * objs[0].get_size()
    assert plugin.stats()["blocks_delivered"] == 4
    plugin.close()


def test_recorded_trace_carries_loads_and_the_report_draws_them(tmp_path: Path) -> None:
    """A capture with delivered/failed loads per request, read by ``fcctl analyze`` as before and
    shown by ``fcctl report`` as the Monitors section (delivered hit share and failed loads per
    window against load)."""
    trace = tmp_path / "capture.jsonl"
    kv = SessionKV(
        StoreOptions(str(tmp_path / "kv"), host_bytes=0, ssd_bytes=1 << 26),
        engine="sglang",
        layers=LAYERS,
        layer_page_bytes=PAGE,
        tokens_per_key=16,
        rule=PlacementRule(100, 10_000),
        trace=trace,
    )
    keys = [f"k{i}" for i in range(4)]
    kv.write(keys, _pages(4, 3), session_id="chat")
    # Three requests: all 4 blocks delivered; 2 of 4 delivered; a load that failed (4 blocks).
    for delivered, failed in ((4, 0), (2, 0), (0, 4)):
        kv.record(
            keys,
            session_id="chat",
            source="extra_info",
            delivered_blocks=delivered,
            failed_blocks=failed,
        )
    kv.close(remove=True)
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["delivered_blocks"], r["failed_blocks"]) for r in rows] == [(4, 0), (2, 0), (0, 4)]
    m = read_monitors(trace, windows=1)
    (w,) = m.windows
    assert (m.requests, m.requests_known, w.requests) == (3, 3, 3)
    assert w.blocks_requested == 12 and w.blocks_delivered == 6 and w.delivered_hit_share == 0.5
    assert w.requests_failed == 1 and w.blocks_failed == 4
    r = fcctl("analyze", trace, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["trace"]["requests"] == 3
    page = tmp_path / "page.html"
    r = fcctl("report", trace, "-o", page)
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert '<section id="monitors">' in html and 'data-chart="monitors-hit-share"' in html
    assert "delivered hit share" in html and 'id="monitors-windows"' in html
    # A damaged capture is one line naming the file and line, no page.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        trace.read_text().splitlines()[0] + '\n{"flatcake_trace": 1, "timestamp_s": "x"}\n'
    )
    r = fcctl("report", bad, "-o", tmp_path / "bad.html")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "bad.jsonl: line 2: field 'timestamp_s' must be a number" in r.stderr
    assert not (tmp_path / "bad.html").exists()
    bad.write_text(trace.read_text().splitlines()[0] + "\n" + "[" * 100_000 + "\n")
    r = fcctl("report", bad, "-o", tmp_path / "bad.html")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "bad.jsonl: line 2: not a JSON record" in r.stderr
