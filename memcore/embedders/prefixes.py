"""Task prefixes that asymmetric embedding models expect on queries and documents. Pure.

Some retrieval models were trained with an instruction in front of each text and lose a
good part of their quality without it (nomic-embed-text wants ``search_query: `` and
``search_document: ``). ``auto`` looks the model up here; any other value is used verbatim.
"""

from __future__ import annotations

AUTO = "auto"

# Model name prefix (lower case, without an Ollama tag such as ":latest") -> (query, document).
# Each pair is what the model's own card documents for retrieval.
_RETRIEVAL = "Represent this sentence for searching relevant passages: "
KNOWN: dict[str, tuple[str, str]] = {
    "nomic-embed-text": ("search_query: ", "search_document: "),
    "nomic-ai/nomic-embed-text": ("search_query: ", "search_document: "),
    "mxbai-embed-large": (_RETRIEVAL, ""),
    "mixedbread-ai/mxbai-embed-large": (_RETRIEVAL, ""),
    "snowflake-arctic-embed": (_RETRIEVAL, ""),
    "bge-large-en": (_RETRIEVAL, ""),
    "bge-base-en": (_RETRIEVAL, ""),
    "bge-small-en": (_RETRIEVAL, ""),
    "e5-": ("query: ", "passage: "),
    "multilingual-e5": ("query: ", "passage: "),
    "intfloat/e5-": ("query: ", "passage: "),
    "intfloat/multilingual-e5": ("query: ", "passage: "),
}


def known_prefixes(model: str) -> tuple[str, str]:
    """The (query, document) prefixes documented for ``model``; ("", "") when none are
    (bge-m3, OpenAI's text-embedding-3 models and most others embed raw text)."""
    name = model.lower().removeprefix("hf.co/").rsplit(":", 1)[0]
    best = max((k for k in KNOWN if name.startswith(k)), key=len, default=None)
    return KNOWN[best] if best is not None else ("", "")


def task_prefixes(model: str, query: str = AUTO, document: str = AUTO) -> tuple[str, str]:
    """The prefixes to use: each setting verbatim, or the model's documented one for ``auto``."""
    auto_query, auto_document = known_prefixes(model)
    return (
        auto_query if query == AUTO else query,
        auto_document if document == AUTO else document,
    )
