"""Finding a flow's handler module and reading its functions.

The module is looked up beside the flow file first, so two flows with a
``handlers.py`` of the same name in different folders each get their own.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ringflow.callflow.errors import short_repr
from ringflow.callflow.handler_api import options_of
from ringflow.callflow.model import HandlerSpec
from ringflow.callflow.schema import SignatureError, handler_schema


class HandlerModuleError(ImportError):
    pass


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}")


def _local_file(module: str, base_dir: Path) -> Path | None:
    rel = Path(*module.split("."))
    for candidate in (base_dir / f"{rel}.py", base_dir / rel / "__init__.py"):
        if candidate.is_file():
            return candidate.resolve()
    return None


def load_module(module: str, base_dir: Path | None, search_path: bool = True) -> ModuleType:
    """Import ``module``, beside the flow (``base_dir``) first, then on sys.path (unless
    ``search_path`` is false: the worker imports only from its flow directories)."""
    if not _MODULE_NAME.fullmatch(module):
        raise HandlerModuleError(
            f"'{short_repr(module)[1:-1]}' is not a dotted Python module name "
            "(like 'my_handlers' or 'package.handlers')"
        )
    try:
        local = _local_file(module, base_dir) if base_dir is not None else None
    except OSError as exc:
        raise HandlerModuleError(
            f"cannot look for module '{module}' beside the flow: {exc.strerror}"
        ) from None
    if local is None and not search_path:
        raise HandlerModuleError(f"module '{module}' is not in {base_dir}")
    try:
        if local is None:
            return importlib.import_module(module)
        loaded = sys.modules.get(module)
        if loaded is not None and getattr(loaded, "__file__", None) == str(local):
            return loaded
        folder = str(base_dir.resolve()) if base_dir is not None else ""
        added = folder not in sys.path
        if added:
            sys.path.insert(0, folder)
        try:
            spec = importlib.util.spec_from_file_location(module, local)
            if spec is None or spec.loader is None:
                raise HandlerModuleError(f"cannot load {local}")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[module] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                if sys.modules.get(module) is mod:  # no half-run module left behind for the next load
                    del sys.modules[module]
                raise
            return mod
        finally:
            if added:
                sys.path.remove(folder)
    except HandlerModuleError:
        raise
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if local is not None or not (module == missing or module.startswith(f"{missing}.")):
            # the module was found; something it imports was not
            raise HandlerModuleError(f"importing '{module}' failed: {exc}") from None
        where = f" beside the flow ({base_dir}) nor" if base_dir is not None else ""
        raise HandlerModuleError(f"module '{module}' not found{where} on the import path ({exc})") from None
    except (Exception, SystemExit) as exc:  # a module that calls sys.exit() on import
        raise HandlerModuleError(f"importing '{module}' failed: {type(exc).__name__}: {exc}") from None


def get_handler(mod: ModuleType, name: str) -> Callable[..., Any] | None:
    fn = getattr(mod, name, None)
    return fn if callable(fn) else None


def handler_spec(fn: Callable[..., Any]) -> HandlerSpec:
    """Raises :class:`SignatureError` with a message fit for a validation error."""
    description, parameters = handler_schema(fn)
    opts = options_of(fn)
    return HandlerSpec(
        description=description,
        parameters=parameters,
        timeout_s=opts.timeout_s,
        cancel_on_interruption=opts.cancel_on_interruption,
    )


__all__ = ["HandlerModuleError", "SignatureError", "get_handler", "handler_spec", "load_module"]
