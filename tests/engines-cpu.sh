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
