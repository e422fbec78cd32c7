"""Writing an imported flow as YAML a person will go on editing.

Imported flows are a starting point, not an end product, so the YAML keeps the
spec's key order and shows long prompts as ``|`` blocks instead of escaped strings.
"""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block style everywhere, no anchors: a flow file is read and edited by hand."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_ODD_BREAKS = ("\r", "\x85", "\u2028", "\u2029")


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Line breaks other than \n do not survive plain, single-quoted or block style.
    if any(c in value for c in _ODD_BREAKS):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    # PyYAML falls back to quoting by itself when a block cannot hold the text exactly.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(flow: dict[str, Any]) -> str:
    """The flow as readable YAML (block style, spec key order, unicode as is)."""
    return yaml.dump(
        flow, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )
