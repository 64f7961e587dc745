"""An OpenRouter-compatible HTTP server that answers with simulated completions and faults.

Every served completion keeps its ground truth (the exact ids the "model" generated) in memory and,
optionally, in a JSON-lines file flushed per record, so tests can check a client's reconstruction.
This module starts and stops one (``start_simulator``, ``serve_forever``, ``SimulatorThread``);
``simulation.Simulator`` holds its state and decisions, ``chat`` and ``listing`` its routes.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import sys
import threading

from aiohttp import web

from draftgen.simulator.chat_request import REVISION_SYSTEM_PROMPT
from draftgen.simulator.config import SimConfig
from draftgen.simulator.listing import SIMULATOR_KEY_LABEL, wire_price
from draftgen.simulator.simulation import API_PREFIX, Simulator

__all__ = [
    "API_PREFIX",
    "REVISION_SYSTEM_PROMPT",
    "SIMULATOR_KEY_LABEL",
    "SimServer",
    "Simulator",
    "SimulatorThread",
    "serve_forever",
    "start_simulator",
    "wire_price",
]


class SimServer:
    """A running simulator: ``base_url`` to call, ``truth`` and ``stats`` to inspect."""

    def __init__(self, simulator: Simulator, runner: web.AppRunner, base_url: str) -> None:
        self._simulator = simulator
        self._runner = runner
        self.base_url = base_url
        self.truth = simulator.truth
        self.stats = simulator.stats
        self.config = simulator.config
        self.profile = simulator.profile
        self.tokenizer = simulator.tokenizer
        self.batches = simulator.batch  # the batch APIs' state, log and ground truth

    async def close(self) -> None:
        await self._runner.cleanup()
        self._simulator.close()


async def start_simulator(config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> SimServer:
    simulator = Simulator(config)
    runner = web.AppRunner(
        simulator.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    sockets = runner.addresses
    bound_port = sockets[0][1] if sockets else port
    return SimServer(simulator, runner, f"http://{host}:{bound_port}{API_PREFIX}")


def serve_forever(config: SimConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the simulator until SIGINT/SIGTERM, printing its base URL first (for scripts)."""

    async def main() -> None:
        server = await start_simulator(config, host, port)
        print(f"draftgen simulator listening on {server.base_url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        try:
            await stop.wait()
        finally:
            await server.close()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.stderr.write("draftgen simulator stopped\n")


class SimulatorThread:
    """The simulator on its own event loop in a background thread, for synchronous tests.

    Use it as a context manager: ``with SimulatorThread(config) as sim:`` then point the client
    at ``sim.base_url`` and read ``sim.truth`` afterwards.
    """

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: SimServer | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(config, host, port), name="draftgen-simulator", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _run(self, config: SimConfig, host: str, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(start_simulator(config, host, port))
        except BaseException as exc:  # handed to the constructing thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._server.close())
        self._loop.close()

    @property
    def server(self) -> SimServer:
        assert self._server is not None
        return self._server

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def truth(self) -> dict[str, dict]:
        return self.server.truth

    @property
    def stats(self) -> collections.Counter:
        return self.server.stats

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> SimulatorThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
