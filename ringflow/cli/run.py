"""How a CLI command runs its async part so the process never aborts at exit.

A Temporal client owns Rust objects (a gRPC connection on the SDK's Tokio runtime). The
client is caught in reference cycles, so without help it is only freed by the collector
during interpreter finalization; dropping it then races the Tokio threads against the
interpreter's teardown, and about half the runs of a short command died with exit 134,
``Fatal Python error: PyGILState_Release`` (temporalio/sdk-python#300, open upstream).
The workaround: free every client while the interpreter and the event loop are still
fully alive. ``run_async`` does that whatever way the command ends: it clears the locals
of the frames an exception carries (the traceback stays printable) and collects garbage
before the loop closes. The SDK's own Tokio threads outlive every client, though, and can
still race the teardown; ``exit_now`` is the second half: the ``ringflow`` script leaves a
process that loaded the SDK without finalizing it (``ringflow.cli.entry_point``).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

START_TEMPORAL_HINT = (
    "start a local one with `make run` or `ringflow dev`, or point RINGFLOW_TEMPORAL_ADDRESS at your cluster"
)


def _clear_exception_frames(exc: BaseException) -> None:
    """Drop the locals (clients among them) that ``exc`` and its chain keep alive."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__)
        todo += [e.__cause__, e.__context__]


def run_async(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(main())`` for a command that connects to Temporal (see module doc).
    asyncio is imported here, not with the module: every ``ringflow`` process imports this
    one for ``exit_now``, and ``--help`` or ``flow validate`` has no loop to run."""
    import asyncio

    async def guarded() -> T:
        try:
            return await main()
        except BaseException as exc:
            _clear_exception_frames(exc)
            raise
        finally:
            gc.collect()

    return asyncio.run(guarded())


def exit_now(code: object) -> None:
    """Leave the process with ``code`` (``SystemExit``'s meaning: None is 0, an int is the
    status, anything else is printed and is 1) without finalizing the interpreter, after what
    finalizing would have done that matters: the exit handlers (logging's flush, OpenTelemetry's
    span export, multiprocessing's children) and the standard streams. Why: ``entry_point``."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing left to save
                pass
        os._exit(status)


def missing_extra(err: ModuleNotFoundError, extra: str, command: str) -> str:
    """The one line for a command whose optional dependencies are not installed; ``err``
    re-raised when the missing module is Ringflow's own (a broken install, not an extra)."""
    module = (err.name or "").split(".")[0]
    if not module or module == "ringflow":
        raise err
    return (
        f"{command} needs the [{extra}] extra, which is not installed (no module {module!r}): "
        f"pip install 'ringflow[{extra}]'"
    )


def require_simulator(command: str) -> None:
    """Exit 2 with one clear line where ``ringflow.simulation`` is not installed: the worker
    and agent images leave it out (``.dockerignore``), so ``command`` cannot run there."""
    import importlib

    import typer

    try:
        importlib.import_module("ringflow.simulation")  # light: its names load on first use
    except ImportError:
        typer.echo(
            f"error: {command} needs the simulator (ringflow.simulation), which this install "
            "leaves out (the worker and agent images do); run it where Ringflow is installed "
            "from source or from the wheel",
            err=True,
        )
        raise typer.Exit(2) from None
