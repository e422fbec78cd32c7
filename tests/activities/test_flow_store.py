"""Published flow versions in SQL, on SQLite and PostgreSQL: content-addressed, immutable,
channels that move without touching the versions, and references that say what exists."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ringflow.activities import flow_store
from ringflow.activities.flow_store import FlowRefError
from ringflow.callflow.errors import FlowError
from ringflow.callflow.model import FlowDefinition
from tests.support.paths import ROOT
from tests.support.wfkit import FIXTURES, clinic

EXAMPLES = ROOT / "examples" / "flows"

# The PostgreSQL schema is the run's, shared by tests: each test publishes under its own name.
NAME = f"clinic-{uuid.uuid4().hex[:8]}"


def named(name: str) -> FlowDefinition:
    return flow_store.named(clinic(), name)


def retasked(text: str, name: str) -> FlowDefinition:
    d = named(name)
    nodes = dict(d.flow.nodes)
    nodes["verify"] = nodes["verify"].model_copy(update={"task": text})
    return d.model_copy(update={"flow": d.flow.model_copy(update={"nodes": nodes})})


def test_the_same_content_publishes_to_the_same_id(database_url: str) -> None:
    name = f"{NAME}-a-{database_url[:5]}"
    d = named(name)
    hashes = flow_store.handler_hashes(d, FIXTURES)
    assert set(hashes) == {"clinic_handlers"} and len(hashes["clinic_handlers"]) == 64
    first = flow_store.publish(database_url, d, hashes, now=1.0)
    moved = d.model_copy(update={"source": "/elsewhere/clinic.yaml"})  # another checkout: same content
    again = flow_store.publish(database_url, moved, hashes, now=2.0)
    assert again.version == first.version and again.published_at == 1.0  # one row, unchanged
    other_code = flow_store.publish(database_url, d, {"clinic_handlers": "f" * 64}, now=3.0)
    other_flow = flow_store.publish(database_url, retasked("Say who you are.", name), hashes, now=4.0)
    assert len({first.version, other_code.version, other_flow.version}) == 3
    listed = flow_store.list_versions(database_url, name)
    assert [v.version for v in listed] == [other_flow.version, other_code.version, first.version]
    back = flow_store.load_definition(database_url, name, first.version)
    assert back.flow == d.flow and back.handlers == d.handlers


def test_channels_and_references(database_url: str) -> None:
    name = f"{NAME}-b-{database_url[:5]}"
    hashes = flow_store.handler_hashes(clinic(), FIXTURES)
    v1 = flow_store.publish(database_url, named(name), hashes, now=1.0)
    v2 = flow_store.publish(database_url, retasked("Ask who is speaking.", name), hashes, now=2.0)
    # NAME without a production channel: the newest version
    assert flow_store.resolve(database_url, name).version == v2.version
    flow_store.promote(database_url, name, v1.version, "production")
    flow_store.promote(database_url, name, v2.version, "canary")
    assert flow_store.resolve(database_url, name).version == v1.version
    assert flow_store.resolve(database_url, f"{name}@canary").version == v2.version
    assert flow_store.resolve(database_url, f"{name}@{v2.version}").version == v2.version
    flow_store.promote(database_url, name, v2.version, "production")
    assert flow_store.resolve(database_url, f"{name}@production").version == v2.version
    served = flow_store.get_version(database_url, name, v2.version)
    assert served is not None and served.channels == ["canary", "production"]
    with pytest.raises(
        FlowRefError, match=r"neither a published version nor a channel.*channels: canary, production"
    ):
        flow_store.resolve(database_url, f"{name}@staging")
    with pytest.raises(FlowRefError, match="no version of flow 'nobody' is published"):
        flow_store.resolve(database_url, "nobody@production")
    with pytest.raises(FlowRefError, match="is not published"):
        flow_store.promote(database_url, name, "0" * 12, "production")
    with pytest.raises(FlowRefError, match="not a valid name"):
        flow_store.promote(database_url, name, v1.version, "Prod uction")


def _caller(tmp_path: Path, use: str) -> Path:
    """pharmacy_refill, its subflow node using ``use``."""
    text = (EXAMPLES / "pharmacy_refill" / "flow.yaml").read_text()
    path = tmp_path / "pharmacy_refill" / "flow.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace("use: ../verify_identity/flow.yaml", f"use: {use}"))
    return path


def test_a_caller_publishes_with_its_subflows_content_and_may_use_a_published_version(
    database_url: str, tmp_path: Path
) -> None:
    """Issue 32 §2: a version holds the subflow's nodes, so a changed subflow is another
    version of every flow using it; ``use: NAME@VERSION`` (or a channel) reads the store."""
    sub_name = f"verify-{uuid.uuid4().hex[:8]}"
    sub_file = tmp_path / "verify_identity" / "flow.yaml"
    sub_file.parent.mkdir()
    sub_file.write_text((EXAMPLES / "verify_identity" / "flow.yaml").read_text())
    by_file = _caller(tmp_path, "../verify_identity/flow.yaml")
    _, v1 = flow_store.publish_file(database_url, by_file, f"refill-{sub_name}")
    content, _ = flow_store.load_content(database_url, v1.version) or ("", None)
    assert '"verify.ask_dob"' in content and "that's you confirmed" in content
    sub_file.write_text(sub_file.read_text().replace("that's you confirmed", "you're confirmed"))
    _, v2 = flow_store.publish_file(database_url, by_file, f"refill-{sub_name}")
    assert v2.version != v1.version  # only the subflow changed

    _, sub_v = flow_store.publish_file(database_url, sub_file, sub_name)
    flow_store.promote(database_url, sub_name, sub_v.version, "production")
    for use in (f"{sub_name}@{sub_v.version}", f"{sub_name}@production"):
        definition, version = flow_store.publish_file(
            database_url, _caller(tmp_path, use), f"refill-{sub_name}"
        )
        assert definition.subflows["verify"].digest == sub_v.version
        assert definition.flow.nodes["verify.verified"].greeting == "Thank you, you're confirmed."
        back = flow_store.load_definition(database_url, version.name, version.version)
        assert back.subflows == definition.subflows and back.flow == definition.flow

    with pytest.raises(FlowError) as caught:
        flow_store.publish_file(database_url, _caller(tmp_path, f"{sub_name}@000000000000"), "nope")
    assert [str(e) for e in caught.value.errors] == [
        f"nodes.verify.use: subflow '{sub_name}@000000000000': '000000000000' is neither a published "
        f"version nor a channel of flow '{sub_name}' (channels: production; versions: "
        f"`ringflow flow versions {sub_name}`)"
    ]
