"""Making imported text safe as Ringflow templates.

Ringflow treats every ``{{...}}`` in a prompt as a placeholder and refuses names it
cannot resolve. Imported prompts may hold placeholders for call inputs the source
tool resolved at run time, or ``{{`` in a sense of their own; both must be turned
into something that validates, and the user told what was done.
"""

from __future__ import annotations

import re
from typing import Any

from ringflow.callflow.importers._common import DocPath, Warnings
from ringflow.callflow.templating import BUILTINS, TemplateSyntaxError, compile_template

_PLACEHOLDER = re.compile(r"\{\{\s*(.*?)\s*\}\}", re.S)
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def _defuse(text: str) -> str:
    """Break every ``{{`` that is not a placeholder, so it reads as plain text."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1).partition("|")[0].strip()
        if _PATH.match(name):
            return m.group(0)
        inner = m.group(1).replace("{{", "{ {").replace("}}", "} }")
        return "{ " + inner + " }"

    fixed = _PLACEHOLDER.sub(one, text)
    try:
        compile_template(fixed)
    except TemplateSyntaxError:
        while "{{" in fixed:
            fixed = fixed.replace("{{", "{ {")
    return fixed


class TemplateFixer:
    """Declares the call inputs imported templates use, and defuses broken ones.

    An undeclared name becomes a declared (optional) variable rather than being
    given a fallback, so the prompt keeps its meaning and the user sees the input
    the flow expects, in ``variables`` and in a warning.
    """

    def __init__(self, variables: dict[str, Any], extracted: set[str], warnings: Warnings) -> None:
        self.variables = variables
        self.known = set(variables) | extracted
        self.warnings = warnings

    def fix(self, value: str | None, path: DocPath, what: str) -> str | None:
        if not isinstance(value, str) or "{{" not in value:
            return value
        try:
            template = compile_template(value)
        except TemplateSyntaxError:
            value = _defuse(value)
            self.warnings.add(
                path,
                f"{what}: '{{{{' that is not a Ringflow placeholder was "
                "broken up as '{ {' so it reads as text; check the wording",
            )
            template = compile_template(value)
        for ph in template.placeholders:
            head = ph.path[0]
            if ph.fallback is not None or head == "state" or head in BUILTINS or head in self.known:
                continue
            self.known.add(head)
            dotted = len(ph.path) > 1
            self.variables[head] = {
                "type": "object" if dotted else "string",
                "description": "Used by the imported prompts; give it when a call starts.",
            }
            self.warnings.add(
                path,
                f"{what}: template variable '{head}' is not defined in the "
                "source; declared it under 'variables' (optional, no default)",
            )
        return value
