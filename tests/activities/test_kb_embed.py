"""The MiniLM embedder (``activities/kb_embed.py``) runs the packaged model's weights with
numpy: its tokens and vectors are sentence-transformers' own (reference values computed with
sentence-transformers 6.2 on the same weights), and similar texts land near each other."""

from __future__ import annotations

import pytest

from ringflow.activities.kb_embed import EmbedderError, basic_tokens, embedder_for


def test_tokens_are_berts_uncased_wordpieces() -> None:
    e = embedder_for("minilm")
    tok = e.tokenizer  # type: ignore[attr-defined]
    assert basic_tokens("Café naïve: résumé! 3.14") == ["cafe", "naive", ":", "resume", "!", "3", ".", "14"]
    ids = tok.encode("unaffordable")
    words = {i: w for w, i in tok.ids.items()}
    assert [words[i] for i in ids] == ["[CLS]", "una", "##ff", "##ord", "##able", "[SEP]"]


def test_vectors_match_sentence_transformers() -> None:
    e = embedder_for("minilm")
    a, b = e.embed(["What time do you open?", "Café naïve: résumé!"])
    assert len(a) == 384 and abs(sum(x * x for x in a) - 1.0) < 1e-5
    assert a[:6] == pytest.approx([0.048226, -0.033473, -0.026265, 0.025176, 0.017833, 0.010044], abs=2e-6)
    assert b[:6] == pytest.approx([-0.027186, -0.002493, 0.016364, 0.049732, 0.068179, 0.066037], abs=2e-6)


def test_a_question_is_nearer_its_answer_than_other_facts() -> None:
    q, hours, parking = embedder_for("minilm").embed(
        ["When do you open?", "The clinic opens at eight in the morning.", "Parking costs five dollars."]
    )
    dot = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert dot(q, hours) > dot(q, parking) + 0.2


def test_an_unknown_embedder_is_named() -> None:
    with pytest.raises(EmbedderError, match=r"'word2vec'.*minilm"):
        embedder_for("word2vec")
