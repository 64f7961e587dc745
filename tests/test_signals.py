"""The stop signals said once (draftgen/signals.py): their handlers set and put back, and no other
module of the product names the tuple or sets a handler of its own.
"""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import threading
from pathlib import Path

from draftgen.signals import (
    SIGNALS,
    SignalHandlers,
    SignalInterrupt,
    add_loop_handlers,
    remove_loop_handlers,
)

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "draftgen"
# Handlers of other signals, for other jobs: the reconstruction's worker processes ignore Ctrl-C
# (their parent handles it), the test server stops on SIGINT and SIGTERM, and the store waits out
# SIGBUS from SQLite's mapped -shm file while the run directory is immutable.
OTHER_JOBS = {"reconstruct/background.py", "simulator/server.py", "store/mapped.py"}
SETTERS = {"signal", "add_signal_handler", "remove_signal_handler"}


def test_the_three_signals():
    assert SIGNALS == (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def test_handlers_are_set_and_put_back():
    def handler(signum, frame):
        pass

    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    with SignalHandlers(handler):
        assert {signum: signal.getsignal(signum) for signum in SIGNALS} == dict.fromkeys(
            SIGNALS, handler
        )
    assert {signum: signal.getsignal(signum) for signum in SIGNALS} == before


def test_outside_the_main_thread_nothing_is_set():
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    seen = []

    def in_a_thread():
        handlers = SignalHandlers(lambda signum, frame: None)
        handlers.install()  # signal.signal would raise ValueError here
        seen.append({signum: signal.getsignal(signum) for signum in SIGNALS})
        handlers.restore()

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [before]


def test_a_signal_raised_as_ctrl_c_names_itself():
    interrupt = SignalInterrupt(signal.SIGHUP)
    assert isinstance(interrupt, KeyboardInterrupt)
    assert (interrupt.signum, str(interrupt)) == (signal.SIGHUP, "SIGHUP")


def test_the_loop_hears_each_signal_until_removed():
    async def hear_each() -> list[int]:
        loop = asyncio.get_running_loop()
        heard: list[int] = []
        arrived = asyncio.Event()

        def on_signal(signum: int) -> None:
            heard.append(signum)
            arrived.set()

        add_loop_handlers(loop, on_signal)
        try:
            for signum in SIGNALS:
                arrived.clear()
                os.kill(os.getpid(), signum)
                await asyncio.wait_for(arrived.wait(), 30)
        finally:
            remove_loop_handlers(loop)
        return heard

    assert asyncio.run(hear_each()) == list(SIGNALS)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def signal_handling_in(path: Path) -> list[str]:
    """What ``path`` does with signals itself: SIGHUP named (only the stop tuple has it), a
    handler set with ``signal.signal`` or on an event loop."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "SIGHUP":
            found.append(f"line {node.lineno}: SIGHUP")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in SETTERS:
            if node.func.attr != "signal" or getattr(node.func.value, "id", None) == "signal":
                found.append(f"line {node.lineno}: {node.func.attr}()")
    return found


def test_only_the_signal_module_sets_the_stop_signals():
    # The check sees what it looks for: the module itself does both.
    assert signal_handling_in(PACKAGE / "signals.py")
    problems = {
        name: found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (name := path.relative_to(PACKAGE).as_posix()) not in OTHER_JOBS | {"signals.py"}
        and (found := signal_handling_in(path))
    }
    assert problems == {}
