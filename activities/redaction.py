"""A redacted copy of a transcript: phone numbers, email addresses, payment card numbers
and street addresses replaced by their kind (``<PHONE_NUMBER>``, Presidio's entity names),
for what leaves the call (the webhook, the analysis LLM) when the flow asks for it. The
original stays as it was (encrypted in Temporal's payloads and in the database).

A pattern recognizer set of our own, not Presidio: Presidio's analyzer depends on spaCy and
loads a language model at start, which cannot be fetched where Ringflow's tests run; these
patterns need nothing. Card numbers are checked with the Luhn sum, so order numbers and
dates are left alone; names are not recognised (that needs a model).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
# 13 to 19 digits, in groups separated by single spaces or dashes
CARD = re.compile(r"\b\d(?:[ -]?\d){12,18}\b")
# +CC and 7 to 14 more digits with the usual separators, a North American 10-digit number,
# or a national number with its trunk 0 (07700 900123, 020 7946 0958)
PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?(?:\(?\d{1,4}\)?[\s.-]?){1,4}\d{2,4}"
    r"|\(?\b\d{3}\)?[\s.-]?\d{3}[\s.-]?\d{4}"
    r"|\b0\d{2,4}[\s.-]?\d{3,4}[\s.-]?\d{3,4})\b"
)
_STREET = (
    "street|st|avenue|ave|road|rd|boulevard|blvd|lane|ln|drive|dr|court|ct|way|place|pl|"
    "terrace|close|parkway|pkwy|square|sq|highway|hwy"
)
ADDRESS = re.compile(
    rf"\b\d{{1,6}}[A-Za-z]?\s+(?:[A-Z][A-Za-z'-]*\s+){{1,4}}(?:{_STREET})\b\.?"
    r"(?:,?\s+(?:apt|apartment|suite|unit)\.?\s*#?\w+)?",
    re.IGNORECASE,
)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(m: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", m.group(0))
    return "<CREDIT_CARD>" if 13 <= len(digits) <= 19 and luhn_ok(digits) else m.group(0)


def _phone(m: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", m.group(0))
    return "<PHONE_NUMBER>" if 7 <= len(digits) <= 15 else m.group(0)


# In this order: a card number is digits a phone pattern would also take.
RECOGNIZERS: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    ("EMAIL_ADDRESS", EMAIL, lambda m: "<EMAIL_ADDRESS>"),
    ("CREDIT_CARD", CARD, _card),
    ("ADDRESS", ADDRESS, lambda m: "<ADDRESS>"),
    ("PHONE_NUMBER", PHONE, _phone),
)


def redact(text: str) -> str:
    """``text`` with every recognised entity replaced by ``<KIND>``."""
    for _, pattern, replace in RECOGNIZERS:
        text = pattern.sub(replace, text)
    return text


def redact_turns(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of transcript entries with their text redacted; the originals are not touched."""
    return [{**t, "text": redact(str(t.get("text") or ""))} for t in turns]
