"""A flow's ``voice:`` block and a node's own: what validation refuses (where, why, with a
"did you mean"), how a node's settings lie over the flow's, and that the provider lists are
livekit-agents' own."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from ringflow.callflow.loader import validate_data
from ringflow.callflow.voice import STT_PROVIDERS, TTS_PROVIDERS, VoiceSettings, voice_for
from ringflow.cli import app
from tests.support.engine_flows import agent, end, flow, go

FLOW_VOICE: dict[str, Any] = {
    "tts": [
        {"provider": "cartesia", "model": "sonic-2", "voice": "abc", "language": "en"},
        {"provider": "openai"},
    ],
    "stt": {"provider": "deepgram", "model": "nova-3", "language": "en", "keywords": ["Ringflow"]},
    "llm": {"model": "gpt-4.1-mini", "temperature": 0.3},
    "turn_detection": "model",
    "endpointing": {"min_delay_s": 0.4, "max_delay_s": 2.5},
    "interruption": {"min_duration_s": 0.5, "min_words": 1},
    "background_audio": {"thinking": "keyboard", "ambient": "office"},
    "noise_cancellation": "telephony",
}


def voiced(flow_voice: Any = None, **node_voice: Any) -> dict[str, Any]:
    greet = agent(go("done", "bye"), **({"voice": node_voice} if node_voice else {}))
    top = {"voice": flow_voice} if flow_voice is not None else {}
    return flow({"greet": greet, "bye": end()}, **top)


def errors(data: dict[str, Any]) -> list[str]:
    report = validate_data(data)
    return [str(e) for e in report.errors]


def test_the_spec_example_validates_and_a_single_provider_is_a_list_of_one() -> None:
    report = validate_data(voiced(FLOW_VOICE, tts={"provider": "rime", "model": "mistv2"}))
    assert report.ok, report.errors
    assert report.definition is not None
    fv = report.definition.flow.voice
    assert fv is not None and fv.stt is not None and fv.tts is not None
    assert [c.provider for c in fv.tts] == ["cartesia", "openai"] and len(fv.stt) == 1
    assert fv.stt[0].keywords == ["Ringflow"]


@pytest.mark.parametrize(
    ("data", "path", "says"),
    [
        (voiced({"ttts": [{"provider": "openai"}]}), "voice.ttts", "did you mean 'tts'"),
        (voiced({"tts": {"provider": "cartesa"}}), "voice.tts.provider", "did you mean 'cartesia'"),
        (voiced({"stt": {"provider": "dipgram", "model": "nova-3"}}), "voice.stt.provider", "'deepgram'"),
        (voiced({"stt": {"provider": "deepgram"}}), "voice.stt[0].model", "model: nova-3"),
        (
            voiced({"tts": {"provider": "openai", "voise": "alloy"}}),
            "voice.tts.voise",
            "did you mean 'voice'",
        ),
        (voiced({"endpointing": {"min_delay": 0.4}}), "voice.endpointing.min_delay", "'min_delay_s'"),
        (
            voiced({"endpointing": {"min_delay_s": 2, "max_delay_s": 1}}),
            "voice.endpointing",
            "below min_delay_s",
        ),
        (voiced({"interruption": {"min_word": 2}}), "voice.interruption.min_word", "'min_words'"),
        (voiced({"turn_detection": "vda"}), "voice.turn_detection", "'model' or 'vad'"),
        (
            voiced({"background_audio": {"thinking": "keybord"}}),
            "voice.background_audio.thinking",
            "'keyboard'",
        ),
        (voiced({"background_audio": {"ambient": "ofice"}}), "voice.background_audio.ambient", "'office'"),
        (voiced({"noise_cancellation": "krisp"}), "voice.noise_cancellation", "'telephony' or 'none'"),
        (voiced({"llm": {"temperature": 3}}), "voice.llm.temperature", "less than or equal to 2"),
        (
            voiced(None, noise_cancellation="telephony"),
            "nodes.greet.voice.noise_cancellation",
            "flow's voice",
        ),
        (voiced(None, tts={"provider": "elevenlab"}), "nodes.greet.voice.tts.provider", "one of openai"),
        (voiced(None, sst={"provider": "openai"}), "nodes.greet.voice.sst", "did you mean 'stt'"),
        (voiced({"tts": [{"provider": "openai"}, {"provider": "rimme"}]}), "voice.tts[1].provider", "'rime'"),
    ],
)
def test_bad_voice_settings_are_refused_saying_where_and_why(
    data: dict[str, Any], path: str, says: str
) -> None:
    found = errors(data)
    assert any(e.startswith(path) and says in e for e in found), found


def test_a_gate_node_has_no_voice_and_an_end_node_does_not_listen() -> None:
    data = flow(
        {
            "route": {"type": "gate", "branches": [], "default": "bye", "voice": {"turn_detection": "vad"}},
            "bye": end(voice={"endpointing": {"min_delay_s": 0.2}, "tts": {"provider": "openai"}}),
        }
    )
    report = validate_data(data)
    assert any(str(e).startswith("nodes.route.voice") and "gate node" in str(e) for e in report.errors)
    assert any(str(w).startswith("nodes.bye.voice") and "does not listen" in str(w) for w in report.warnings)


def test_a_failover_to_the_same_provider_is_pointed_out() -> None:
    report = validate_data(voiced({"tts": [{"provider": "openai"}, {"provider": "openai"}]}))
    assert report.ok
    assert any(str(w).startswith("voice.tts[1]") for w in report.warnings), report.warnings


def test_telephony_noise_cancellation_is_noted_as_livekit_cloud_s_not_refused(tmp_path: Path) -> None:
    """The filter is LiveKit Cloud's plugin, which Ringflow cannot run: ``flow validate``
    says so (a note: the flow is valid, and the note is not a warning), on the text output
    and in --json."""
    report = validate_data(voiced({"noise_cancellation": "telephony"}))
    assert report.ok and report.warnings == []
    assert [str(n) for n in report.notes] == [
        "voice.noise_cancellation: telephony noise cancellation runs only on LiveKit Cloud, with "
        "livekit-plugins-noise-cancellation installed on the agent (Ringflow does not install it); "
        "elsewhere the call runs unfiltered and the agent logs noise_cancellation_missing"
    ]
    assert validate_data(voiced({"noise_cancellation": "none"})).notes == []
    path = tmp_path / "nc.yaml"
    path.write_text(yaml.safe_dump(voiced({"noise_cancellation": "telephony"})))
    out = CliRunner().invoke(app, ["flow", "validate", str(path)])
    assert out.exit_code == 0, out.output
    assert (
        f"{path}: note: voice.noise_cancellation: telephony noise cancellation runs only on LiveKit Cloud"
        in out.output
    )
    assert "note" not in out.output.strip().splitlines()[-1]  # valid; a note is not a warning
    as_json = json.loads(CliRunner().invoke(app, ["flow", "validate", "--json", str(path)]).output)
    assert as_json["valid"] is True and [n["path"] for n in as_json["notes"]] == ["voice.noise_cancellation"]


def test_a_nodes_voice_lies_over_the_flows_key_by_key() -> None:
    base = VoiceSettings.model_validate(FLOW_VOICE)
    own = VoiceSettings.model_validate(
        {"tts": {"provider": "openai", "voice": "nova"}, "turn_detection": "vad"}
    )
    merged = voice_for(base, own)
    assert merged.tts is not None and [(c.provider, c.voice) for c in merged.tts] == [("openai", "nova")]
    assert merged.turn_detection == "vad"
    assert merged.stt == base.stt and merged.endpointing == base.endpointing  # the flow's, untouched
    # the small blocks field by field: a node naming only min_delay_s keeps the flow's max
    timing = VoiceSettings.model_validate(
        {"endpointing": {"min_delay_s": 0.1}, "interruption": {"min_words": 3}}
    )
    laid = voice_for(base, timing)
    assert laid.endpointing is not None and laid.interruption is not None
    assert (laid.endpointing.min_delay_s, laid.endpointing.max_delay_s) == (0.1, 2.5)
    assert (laid.interruption.min_duration_s, laid.interruption.min_words) == (0.5, 3)
    assert laid.tts == base.tts
    assert voice_for(base, None) == base
    assert voice_for(None, own) == own
    assert voice_for(None, None) == VoiceSettings()


def _providers(literals: Any) -> set[str]:
    out: set[str] = set()
    for member in typing.get_args(literals) or (literals,):
        for name in typing.get_args(member) or ():
            out.add(str(name).split("/", 1)[0])
    return out


def test_the_providers_are_what_livekit_agents_can_build() -> None:
    """Every provider but ``openai`` (livekit's plugin) is LiveKit Inference's: the lists in
    ``callflow/voice.py`` are its model literals' providers, so an upgrade of livekit-agents
    that adds or drops one fails here."""
    from livekit.agents.inference import stt as inference_stt
    from livekit.agents.inference import tts as inference_tts

    assert set(TTS_PROVIDERS) - {"openai"} == _providers(inference_tts.TTSModels)
    stt_literals = [v for k, v in vars(inference_stt).items() if k.endswith("Models") and k != "STTModels"]
    found: set[str] = set()
    for lit in stt_literals:
        found |= {str(n).split("/", 1)[0] for n in typing.get_args(lit)}
    assert set(STT_PROVIDERS) == found | {"openai"}


def test_inside_a_subflow_its_flows_voice_applies_falling_back_to_the_callers(tmp_path: Path) -> None:
    """A used flow's ``voice`` holds on its own nodes, a node's own over it, and whatever
    the used flow leaves unset is the calling flow's; the calling flow's nodes keep the
    calling flow's; noise cancellation stays the call's (the caller's), never the used flow's."""
    sub = flow(
        {
            "ask": agent(go("done", "fin"), voice={"endpointing": {"max_delay_s": 4}}),
            "fin": end(),
        },
        voice={
            "tts": {"provider": "openai", "voice": "alloy"},
            "endpointing": {"min_delay_s": 0.2},
            "background_audio": {"ambient": "office"},
            "noise_cancellation": "telephony",
        },
    )
    (tmp_path / "sub.yaml").write_text(yaml.safe_dump(sub))
    (tmp_path / "plain.yaml").write_text(
        yaml.safe_dump(flow({"ask": agent(go("done", "fin")), "fin": end()}))
    )
    caller_voice = {
        "tts": {"provider": "cartesia", "model": "sonic-2"},
        "stt": {"provider": "deepgram", "model": "nova-3"},
        "endpointing": {"min_delay_s": 0.5, "max_delay_s": 2.0},
        "background_audio": {"thinking": "keyboard", "volume": 0.5},
        "noise_cancellation": "none",
    }
    data = flow(
        {
            "start": agent(go("go_sub", "sub")),
            "sub": {"type": "subflow", "use": "sub.yaml", "transition_to": "plain"},
            "plain": {"type": "subflow", "use": "plain.yaml", "transition_to": "bye"},
            "bye": end(),
        },
        voice=caller_voice,
    )
    report = validate_data(data, base_dir=tmp_path)
    assert report.ok, report.errors
    assert report.definition is not None
    assert [str(w) for w in report.warnings] == [
        "nodes.sub.use: subflow sub.yaml: its 'voice.noise_cancellation' does not apply: it is "
        "the call's, the calling flow's (its other voice settings apply on its nodes)"
    ]
    top = report.definition.flow

    def on(node: str) -> dict[str, Any]:
        return voice_for(top.voice, top.nodes[node].voice).model_dump(mode="json", exclude_none=True)

    callers = on("start")
    assert callers == VoiceSettings.model_validate(caller_voice).model_dump(mode="json", exclude_none=True)
    inside = on("sub.ask")
    assert inside["tts"] == [{"provider": "openai", "voice": "alloy"}]  # the used flow's
    assert inside["stt"] == callers["stt"]  # the used flow sets none: the caller's
    assert inside["endpointing"] == {"min_delay_s": 0.2, "max_delay_s": 4}  # its flow's, its own
    assert inside["background_audio"] == {"thinking": "keyboard", "ambient": "office", "volume": 0.5}
    assert inside["noise_cancellation"] == "none"  # the call's
    assert on("sub.fin")["endpointing"] == {"min_delay_s": 0.2, "max_delay_s": 2.0}
    assert on("sub.fin")["tts"] == [{"provider": "openai", "voice": "alloy"}]
    assert top.nodes["plain.ask"].voice is None and on("plain.ask") == callers  # no voice of its own
    assert on("bye") == callers  # back in the calling flow
