#!/usr/bin/env bash
# The engines the adapter tests run against (fcctl's extra [engines]), on a CPU-only machine:
# a venv over the system site-packages (torch's CPU build comes from there), fcctl's own and its
# test dependencies (read from pyproject.toml, so a system python without them still works:
# numba, psutil, ...), the three engine wheels without their CUDA dependencies, and what their
# interface modules import. .ci/run calls it; by hand:
#   bash tests/engines-cpu.sh /tmp/venv-engines
#   PYTHONPATH=$PWD /tmp/venv-engines/bin/python -m pytest -q -rs tests/test_engine_*.py
set -euo pipefail
VENV=${1:-/work/venv-engines}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
python3 -m venv --system-site-packages "$VENV"
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)
# fcctl's requirements, not fcctl itself: the tests import fcctl from the checkout (PYTHONPATH).
mapfile -t FCCTL_DEPS < <("$VENV/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["test"]))
PY
)
"${PIP[@]}" "${FCCTL_DEPS[@]}"
"${PIP[@]}" --no-deps lmcache==0.5.6 sglang==0.5.23 vllm==0.34.0 triton
"${PIP[@]}" pybase64 cachetools msgspec blake3 pyzmq cbor2 setproctitle aiofile \
    aiofiles prometheus_client tqdm aiohttp transformers starlette \
    uvloop==0.23.0 llguidance==1.7.6 xgrammar==0.2.8 einops  # vLLM's Scheduler and ModelConfig import these on CPU
# SGLang's HiCacheController and host KV pool (tests/test_engine_sglang*.py): its JIT kernels
# import tvm_ffi (apache-tvm-ffi, a CPU wheel); its configs import torchvision (for multimodal
# models), sentencepiece, compressed_tensors, gguf; its utilities dill and loguru. All without
# their dependencies: compressed_tensors' and torchvision's would replace torch's CPU build.
# torchvision 0.28.0 is the release for torch 2.13; PyPI's build links libtorch_cuda, so its
# kernels do not load here and the tests import it as tests/engine_helpers.py explains.
"${PIP[@]}" --no-deps apache-tvm-ffi==0.1.15.post2 torchvision==0.28.0 dill==0.4.1 \
    sentencepiece==0.2.3 compressed-tensors==0.20.1 gguf==0.19.0 loguru==0.7.3
# Every python of this venv (the tests, benchmarks/engine_disk_bench.py, their subprocesses)
# imports torchvision without its kernels: a .pth runs a hook at start that, on the first import
# of torchvision, declares the two op schemas its fake-kernel registrations need (the same
# declaration as tests/engine_helpers.py, which stays for a torchvision installed otherwise).
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cat > "$SITE/fcctl_cpu_torchvision.py" <<'PY'
"""Written by fcctl's tests/engines-cpu.sh into a CPU-only venv: PyPI's torchvision links CUDA
torch, so its kernels never load here; declaring the schemas of torchvision::nms and ::qnms
(no kernels) before it imports lets its fake-kernel registrations, and so the import, succeed."""

import importlib.abc
import sys


class _DeclareTorchvisionOps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        if name == "torchvision":
            sys.meta_path.remove(self)
            import torch

            schema = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
            for op in ("nms", "qnms"):
                try:
                    torch.library.define(f"torchvision::{op}", schema)
                except RuntimeError:  # declared already
                    pass
        return None  # the ordinary finders import it


sys.meta_path.insert(0, _DeclareTorchvisionOps())
PY
echo "import fcctl_cpu_torchvision" > "$SITE/fcctl_cpu_torchvision.pth"
