"""Post-call analysis: one LLM call on the whole transcript, once the call has ended, with a
JSON schema made of what the flow's ``analysis`` asks for (summary, success against its
rubric, sentiment, custom fields), on the extraction LLM (any OpenAI-compatible server,
``OPENAI_BASE_URL``; the scripted endpoint in tests and simulations answers schema
``call_analysis``).

Bounded in tokens: the conversation sent is at most ``MAX_CONVERSATION_CHARS`` (its start
and its end, the middle elided and said so), the answer at most ``MAX_ANSWER_TOKENS``. A bad
answer raises so Temporal retries it; the workflow records the last failure in the
analysis's ``error`` and the call's record stands.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ringflow.activities.extraction import Extractor, check_values, response_schema
from ringflow.activities.metrics import timed
from ringflow.activities.persistence import load_call, load_transcript
from ringflow.activities.redaction import redact_turns
from ringflow.callflow.model import AnalysisPart, AnalysisSettings
from ringflow.contract.analysis import AnalysisInput, CallAnalysis, SuccessEvaluation

SCHEMA_NAME = "call_analysis"
MAX_CONVERSATION_CHARS = 48_000  # ~12k tokens: what a small model reads well
MAX_ANSWER_TOKENS = 1_500
SENTIMENTS = ["positive", "neutral", "negative"]
DEFAULT_SUMMARY = "Summarize the call in two or three sentences: who called, what they wanted, how it ended."
DEFAULT_SENTIMENT = "The caller's overall sentiment over the call."
DEFAULT_SUCCESS = (
    "Judge whether the call met the rubric: pass true or false, a score from 0 (not at all) "
    "to 1 (fully), and the reason in one sentence."
)


def _prompt(part: bool | AnalysisPart, default: str) -> str | None:
    if part is False:
        return None
    return part.prompt if isinstance(part, AnalysisPart) else default


def analysis_schema(settings: AnalysisSettings) -> dict[str, Any]:
    """Strict JSON schema of the answer: only the parts the flow asks for."""
    props: dict[str, Any] = {}
    if (summary := _prompt(settings.summary, DEFAULT_SUMMARY)) is not None:
        props["summary"] = {"type": "string", "description": summary}
    if settings.success is not None:
        props["success"] = {
            "type": "object",
            "description": f"{settings.success.prompt or DEFAULT_SUCCESS} Rubric: {settings.success.rubric}",
            "properties": {
                "pass": {"type": "boolean"},
                "score": {"type": "number"},
                "reason": {"type": "string"},
            },
            "required": ["pass", "score", "reason"],
            "additionalProperties": False,
        }
    if (sentiment := _prompt(settings.sentiment, DEFAULT_SENTIMENT)) is not None:
        props["sentiment"] = {"type": "string", "enum": SENTIMENTS, "description": sentiment}
    if settings.fields:
        props["fields"] = {**response_schema(settings.fields), "description": "Values stated in the call."}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def conversation(transcript: list[dict[str, Any]], limit: int = MAX_CONVERSATION_CHARS) -> str:
    """The transcript as text, at most ``limit`` characters: over it, its start and its end."""
    text = "\n".join(f"{t.get('role', '?')}: {t.get('text', '')}" for t in transcript if t.get("text"))
    if len(text) <= limit:
        return text or "(no conversation)"
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def read_answer(settings: AnalysisSettings, data: Any) -> CallAnalysis:
    """The answer checked against what was asked; a part answered null is left out (a
    scripted endpoint answers only what its script gives)."""
    if not isinstance(data, dict):
        raise ValueError("the answer is not a JSON object")
    out = CallAnalysis()
    if settings.summary and isinstance(data.get("summary"), str):
        out.summary = data["summary"][:8000]
    success = data.get("success")
    if settings.success is not None and success is not None:
        if not isinstance(success, dict) or not isinstance(success.get("pass"), bool):
            raise ValueError("'success' needs 'pass' (true or false)")
        score = success.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
            raise ValueError("'success.score' is a number from 0 to 1")
        out.success = SuccessEvaluation(
            passed=success["pass"],
            score=None if score is None else min(max(float(score), 0.0), 1.0),
            reason=str(success["reason"])[:2000] if success.get("reason") is not None else None,
        )
    sentiment = data.get("sentiment")
    if settings.sentiment and sentiment is not None:
        if sentiment not in SENTIMENTS:
            raise ValueError(f"'sentiment' = {sentiment!r} is not one of {SENTIMENTS}")
        out.sentiment = sentiment
    if settings.fields and data.get("fields") is not None:
        out.fields = check_values(settings.fields, data["fields"])
    return out


class Analyzer:
    """The ``analyze_call`` activity on the extraction LLM's client and the call database."""

    def __init__(self, extractor: Extractor, database_url: str) -> None:
        self.extractor = extractor
        self.database_url = database_url

    def __repr__(self) -> str:
        return f"Analyzer({self.extractor!r})"

    @activity.defn(name="analyze_call")
    async def analyze_call(self, inp: AnalysisInput) -> CallAnalysis:
        with timed("analysis", "llm"):
            return await self._analyze(inp)

    async def _analyze(self, inp: AnalysisInput) -> CallAnalysis:
        turns = inp.transcript
        if inp.transcript_in_db:
            turns = [t.model_dump() for t in load_transcript(inp.call_id, database_url=self.database_url)]
        if inp.settings.redact:
            # the names the call was started with, from its record (persisted before this runs)
            record = await asyncio.to_thread(
                load_call, inp.call_id, database_url=self.database_url, include_turns=False
            )
            turns = redact_turns(turns, record.variables if record is not None else None)
        schema = analysis_schema(inp.settings)
        if not schema["properties"]:
            return CallAnalysis()
        rubric = f"\nRubric for success: {inp.settings.success.rubric}" if inp.settings.success else ""
        try:
            resp = await self.extractor.client().chat.completions.create(
                model=inp.model or self.extractor.model,
                messages=[
                    {
                        "role": "system",
                        "content": "Analyse this phone call transcript after the call ended; "
                        "answer only from what was said." + rubric,
                    },
                    {"role": "user", "content": conversation(turns)},
                ],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": schema},
                },
                max_tokens=MAX_ANSWER_TOKENS,
                user=inp.call_id,  # lets a scripted endpoint answer each call from its own script
            )
            text = resp.choices[0].message.content or ""
            return read_answer(inp.settings, json.loads(text))
        except (ValueError, IndexError) as exc:
            raise ApplicationError(f"analysis of call {inp.call_id}: bad answer: {exc}") from None
