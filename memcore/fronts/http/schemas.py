"""The HTTP contract as types (pydantic): every route's request body or query and its response.

One definition serves three purposes: requests are validated against it (an unknown field, a
wrong type or a value out of range is a one-line 400), responses are serialized through it
(a response that drifts from its type fails loudly instead of surprising a client), and the
OpenAPI 3.1 document at /openapi.json is generated from it (app.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from memcore.search.searcher import MAX_LIMIT


def _whole(value: Any) -> Any:
    """JSON's integers: 600 and 600.0 (JSON Schema counts both), never "600" or true."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


WHOLE = BeforeValidator(_whole)  # after the bounds in Annotated[...], so they stay in the schema
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT), WHOLE]
Offset = Annotated[int, Field(ge=0, le=10_000_000), WHOLE]
Score = Annotated[float, Field(ge=0, le=1)]


def _shape(pattern: str, description: str) -> Any:
    """A pattern the OpenAPI document states and the domain enforces, with its own message
    ("user_id '../x' is not a valid name: ...", "since must be a date like 2024-05-31")."""
    return Field(description=description, json_schema_extra={"pattern": pattern})


# a scope or category: it names a folder or a file (memory_format.check_name)
Name = Annotated[
    str,
    Field(min_length=1, max_length=128),
    _shape(r"^[^\W_][\w.\-@]*$", "letters, digits, '.', '-', '_' or '@'"),
]
# a user, agent, run or app id: any text (core/ids.check_id refuses control characters)
ScopeId = Annotated[str, Field(min_length=1, max_length=256, description="any text, 1-256")]
Word = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(max_length=1_000_000)]
Content = Annotated[str, Field(max_length=1_000_000), _shape(r"\S", "not blank")]
Day = Annotated[str, Field(max_length=32), _shape(r"^\d{4}-\d{2}-\d{2}$", "an ISO date")]
Tag = Annotated[str, Field(max_length=200), _shape(r"^#?[^\s#]+$", "one word, '#' optional")]
JSONObject = dict[str, Any]
# when a memory was made: Unix seconds (Mem0's) or an ISO date / date and time
Moment = Annotated[int | float | str, Field(description="Unix seconds, or an ISO 8601 time")]
Expiry = Annotated[str, Field(max_length=40, description="an ISO date: hidden after that day")]


class Body(BaseModel):
    """A request body: JSON types exactly (no "5" for 5), no unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Query(BaseModel):
    """Query-string parameters: text converted to the field's type, no unknown parameters;
    an empty one (``user_id=``, what some clients send for "none") is left out."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _drop_empty(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v != ""}
        return data


class Out(BaseModel):
    """A response: every field declared (a drift from the contract is a bug, caught here)."""

    model_config = ConfigDict(extra="forbid")


# ---- errors, health ----------------------------------------------------------------------


class ErrorDetail(Out):
    code: str = Field(description="bad_request, unauthorized, forbidden, not_found, ...")
    message: str = Field(description="one line, for a person")


class ErrorOut(Out):
    error: ErrorDetail


class HealthOut(Out):
    ok: bool
    version: str


class ReadyOut(Out):
    ready: bool
    phase: Literal["starting", "catching_up", "ready"]
    files_done: int
    files_total: int


# ---- memcore's own routes ------------------------------------------------------------------


class ScopeFields(Body):
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    run_id: ScopeId | None = None
    app_id: ScopeId | None = None


class ReadFields(ScopeFields):
    """What every read takes: a scope and memcore's read filters."""

    limit: Limit | None = None
    include_shared: bool = False
    scope_only: bool = Field(False, description="legacy; a scope is exclusive by default now")
    include_turns: bool | None = None
    category: Name | None = None
    filters: JSONObject | None = Field(None, description="metadata conditions, Mem0-style")
    tag: Tag | None = None
    path: Annotated[str, Field(max_length=1000)] | None = None
    since: Day | None = None
    until: Day | None = None
    show_expired: bool = Field(False, description="memories past their expiration_date too")


# A caller's own vector for the memory it writes (memory/supplied.py), and the model that made
# it: checked against the index's model and size (a mismatch is a 400 naming both).
OwnVector = Annotated[
    list[float],
    Field(min_length=1, max_length=8192,
          description="your own vector for this text (the index's model and size)"),
]  # fmt: skip
VectorModel = Annotated[
    str,
    Field(min_length=1, max_length=256,
          description="the model that made vector: refused unless it is the index's"),
]  # fmt: skip


class SearchBody(ReadFields):
    query: Text | None = None
    threshold: Score | None = None
    query_vector: Annotated[list[float], Field(min_length=1, max_length=8192)] | None = None
    reinforce: bool = False


class ContextBody(ReadFields):
    query: Text
    min_score: Score | None = None


Role = Literal["system", "user", "assistant", "tool", "tool_result"]


class Message(BaseModel):
    """A chat message in OpenAI's shape (tool_calls, tool_call_id, name and content parts
    are kept as they come)."""

    model_config = ConfigDict(extra="allow")

    role: Role
    content: str | list[JSONObject] | None = None


def message_dicts(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as they came (fields not sent stay out)."""
    return [message.model_dump(exclude_unset=True) for message in messages]


class AddBody(ScopeFields):
    content: Content | None = None
    messages: list[Message] | None = None
    metadata: JSONObject | None = None
    category: Name = "core"
    key: Word | None = None
    infer: bool = False
    timestamp: Moment | None = Field(None, description="when it was made (created_at)")
    expiration_date: Expiry | None = None
    immutable: bool = Field(False, description="true: updates are refused (409)")
    vector: OwnVector | None = None
    vector_model: VectorModel | None = None


class UpdateBody(Body):
    content: Content | None = None
    metadata: JSONObject | None = None
    timestamp: Moment | None = Field(None, description="a new created_at")
    expiration_date: Expiry | None = Field(None, description="a new date; null takes it away")
    vector: OwnVector | None = None
    vector_model: VectorModel | None = None


class CountQuery(Query):
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    run_id: ScopeId | None = None
    app_id: ScopeId | None = None
    category: Name | None = None
    show_expired: bool = False


class ListQuery(CountQuery):
    tag: Tag | None = None
    limit: Annotated[int, Field(ge=1, le=10_000)] = 100
    offset: Offset = 0


class CountedOut(Out):
    count: int


class ConversationQuery(Query):
    limit: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    page: Annotated[int, Field(ge=1)] | None = Field(
        None, description="A page of the transcript (from 1), page_size messages, oldest first"
    )
    page_size: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        None, description="Messages a page (default 100 with page)"
    )


class ConversationBody(Body):
    messages: list[Message]


class FeedbackBody(Body):
    feedback: Literal["POSITIVE", "NEGATIVE", "VERY_NEGATIVE"] | None


class ForgetBody(ScopeFields):
    threshold: Annotated[float, Field(gt=0, lt=1)]
    dry_run: bool = False
    category: Name | None = None


class StrengthOut(Out):
    tier: str
    retrievability: float
    stability_days: float
    difficulty: float
    last_review: str | None
    reviews: int


class MemoryOut(Out):
    id: str
    memory: str
    event: str | None = None
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    app_id: str | None = None
    category: str
    key: str | None
    metadata: JSONObject
    created_at: str | None
    updated_at: str | None
    path: str | None
    start_line: int | None
    end_line: int | None
    score: float | None = None
    strength: StrengthOut | None = None
    expiration_date: str | None = None
    immutable: bool | None = None


class HitOut(Out):
    id: str
    memory_id: str | None = Field(description="the memory's id; null for a note")
    path: str
    start_line: int
    end_line: int
    heading: str
    score: float
    text: str
    vector_score: float | None
    keyword_score: float | None
    date: str | None
    tags: list[str]


class SearchOut(Out):
    query: str
    mode: str
    results: list[HitOut]
    warnings: list[str] | None = None


class ContextOut(Out):
    context: str


class MemoriesOut(Out):
    results: list[MemoryOut]


class DeletedOut(Out):
    deleted: str


class HistoryEvent(Out):
    memory_id: str
    event: str
    old_memory: str | None
    new_memory: str | None
    actor: str | None
    created_at: str | None
    path: str | None
    request: str | None = None
    undo: bool | None = None
    memory: JSONObject | None = None
    via: str | None = Field(None, description="web, cli, api or agent (actor api)")


class HistoryOut(Out):
    results: list[HistoryEvent]


class MessagesOut(Out):
    messages: list[JSONObject]
    count: int | None = Field(None, description="With page: every message of the transcript")
    next: str | None = Field(None, description="With page: the next page's URL")
    previous: str | None = Field(None, description="With page: the previous page's URL")


class SavedOut(Out):
    saved: int


class CountOut(Out):
    deleted: int


class WriteMemoryBody(Body):
    content: Content
    file: Word = Field("MEMORY.md", description="The vault file: MEMORY.md or memory/**/*.md")


class WrittenOut(Out):
    path: str | None = Field(description="The vault file written (null: memory is off)")


class ForgetManyBody(Body):
    memory_ids: Annotated[list[Word], Field(min_length=1, max_length=1000)]


class StatusOut(Out):
    vault: str
    memory: Literal["markdown", "mem0", "none"] = Field(description="memory.adapter in use")
    indexed: bool
    files: int
    chunks: int
    vectors_pending: int
    model_id: str
    other_models: dict[str, int]
    db_path: str
    db_bytes: int
    engine: str
    duplicate_memories: dict[str, list[str]]
    last_indexed: str | None
    skipped: dict[str, str]
    readiness: dict[str, Any]
    reviews_skipped: int = Field(
        0,
        description="Reads since start whose review (a use, for strength) could not be "
        "recorded (a full disk, a read-only vault): skipped, the read answered",
    )
    nodes: list[JSONObject] = Field(
        description="A shared (PostgreSQL) index's live nodes: node (host:pid), host, pid, "
        "kind, url, started_at, seen_at, and roles: true for the one holding the watcher, "
        "catch-up, expiry archiving and forgetting. Empty for a SQLite index."
    )
    daemon: JSONObject | None


# ---- Mem0's routes -------------------------------------------------------------------------


class Mem0Body(Body):
    """A Mem0 request. Mem0's own fields memcore has no use for are accepted, and the answer
    names them in its ``Memcore-Ignored`` header (docs/mem0.md has the table)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    async_mode: Any = None
    version: Any = None
    output_format: Any = None
    org_id: Any = None
    project_id: Any = None
    org_name: Any = None
    project_name: Any = None
    includes: Any = None
    excludes: Any = None
    custom_categories: Any = None
    enable_graph: Any = None
    rerank: Any = None
    keyword_search: Any = None
    fields: Any = None
    filter_memories: Any = None
    categories: Any = None
    # the 2.x client's options that shape inference or versions memcore does not keep
    custom_instructions: Any = None
    agent_custom_instructions: Any = None
    structured_data_schema: Any = None
    reference_date: Any = None


# Mem0 fields memcore accepts and has no use for (they change nothing here)
MEM0_IGNORED = tuple(Mem0Body.model_fields)


class Mem0AddBody(Mem0Body):
    messages: Content | Annotated[list[Message], Field(min_length=1)]
    metadata: JSONObject | None = None
    filters: JSONObject | None = Field(
        None, description="the scope, as the 2.x client sends it: {'user_id': ...}"
    )
    source: Annotated[str, Field(max_length=256)] | None = Field(
        None, description="who sent it (mem0-strands: STRANDS): kept as metadata.source"
    )
    infer: bool | None = None
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    run_id: ScopeId | None = None
    app_id: ScopeId | None = None
    timestamp: Moment | None = Field(None, description="the memories' created_at")
    expiration_date: Expiry | None = Field(None, description="hidden from reads after this")
    immutable: bool | None = Field(None, description="true: updates are refused (409)")
    vector: OwnVector | None = Field(None, description="memcore's extension: your own vector")
    vector_model: VectorModel | None = None


class Mem0ListBody(Mem0Body):
    filters: JSONObject | None = None
    metadata: JSONObject | None = Field(None, description="memories whose metadata holds these")
    start_date: Moment | None = Field(None, description="created on or after (ISO 8601)")
    end_date: Moment | None = Field(None, description="created on or before (ISO 8601)")
    latest_only: bool | None = Field(None, description="always true here (nothing superseded)")
    page: Annotated[int, Field(ge=1, le=1_000_000), WHOLE] | None = None
    page_size: Annotated[int, Field(ge=1, le=10_000), WHOLE] | None = None
    show_expired: bool | None = None
    user_id: ScopeId | None = None  # the v2 listing of 0.1.x clients names the scope here
    agent_id: ScopeId | None = None
    run_id: ScopeId | None = None
    app_id: ScopeId | None = None


class Mem0Params(Query):
    """Query parameters every Mem0 route takes: the org and project a Mem0 client sends on
    every call once its ping named them (ignored: one vault is one project)."""

    org_id: Annotated[str, Field(max_length=256)] | None = None
    project_id: Annotated[str, Field(max_length=256)] | None = None
    org_name: Annotated[str, Field(max_length=256)] | None = None
    project_name: Annotated[str, Field(max_length=256)] | None = None


MEM0_IGNORED_PARAMS = tuple(Mem0Params.model_fields)


class Mem0PageQuery(Mem0Params):
    page: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    page_size: Annotated[int, Field(ge=1, le=10_000)] | None = None


class Mem0SearchBody(Mem0Body):
    query: Text
    filters: JSONObject | None = None
    metadata: JSONObject | None = Field(None, description="memories whose metadata holds these")
    user_id: ScopeId | None = None  # Mem0's v1 search (and seed 000's adapter) name the scope here
    agent_id: ScopeId | None = None
    run_id: ScopeId | None = None
    app_id: ScopeId | None = None
    top_k: Limit | None = None
    limit: Limit | None = None
    threshold: Score | None = Field(None, description="Mem0's default: 0.3")
    show_expired: bool | None = None
    include_notes: bool | None = Field(None, description="vault notes too (not memories)")
    latest_only: bool | None = Field(None, description="always true here (nothing superseded)")


class Mem0UpdateBody(Mem0Body):
    text: Content | None = None
    content: Content | None = Field(None, description="the same as text (seed 000's adapter)")
    metadata: JSONObject | None = None
    timestamp: Moment | None = Field(None, description="a new created_at")
    expiration_date: Expiry | None = Field(None, description="a new date; null takes it away")
    vector: OwnVector | None = Field(None, description="memcore's extension: your own vector")
    vector_model: VectorModel | None = None


class Mem0DeleteQuery(Mem0Params):
    model_config = ConfigDict(extra="allow")  # Mem0's ignored fields come as parameters too

    filters: Annotated[str, Field(max_length=4096)] | None = Field(
        None,
        description="the scope as JSON, or as the 2.x client sends it: "
        "{'user_id': 'alice'} (a Python dict's text)",
    )
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    run_id: ScopeId | None = None
    app_id: ScopeId | None = None


class Mem0DeleteOneQuery(Mem0Params):
    delete_linked: bool | None = Field(None, description="nothing is linked here: no-op")


class Mem0ListQuery(Mem0Params):
    """GET /v1/memories?user_id=...: Mem0's v1 listing (``limit`` or ``page_size``)."""

    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    run_id: ScopeId | None = None
    app_id: ScopeId | None = None
    limit: Annotated[int, Field(ge=1, le=10_000)] | None = None
    page_size: Annotated[int, Field(ge=1, le=10_000)] | None = None
    page: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    show_expired: bool | None = None


class Mem0Feedback(Body):
    memory_id: Word
    feedback: Literal["POSITIVE", "NEGATIVE", "VERY_NEGATIVE"] | None = None
    feedback_reason: Annotated[str, Field(max_length=10_000)] | None = None


class Mem0FeedbackOut(Out):
    id: str
    feedback: str | None
    feedback_reason: str | None
    strength: StrengthOut | None


class EntityOut(Out):
    id: str
    name: str
    type: Literal["user", "agent", "run", "app"]
    total_memories: int
    created_at: str | None
    updated_at: str | None
    owner: str | None = None
    organization: str | None = None
    metadata: JSONObject | None = None


class EntitiesOut(Out):
    count: int
    next: str | None
    previous: str | None
    results: list[EntityOut]


class Mem0BatchItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    memory_id: Word
    text: Content | None = None
    metadata: JSONObject | None = None


class Mem0BatchBody(Body):
    memories: Annotated[list[Mem0BatchItem], Field(min_length=1, max_length=1000)]


class Mem0MemoryOut(MemoryOut):
    categories: list[str]
    hash: str = Field(description="MD5 of the memory's text, as Mem0's")


class Mem0MemoriesOut(Out):
    results: list[Mem0MemoryOut]
    warnings: list[str] | None = None


class Mem0PageOut(Out):
    count: int = Field(description="every memory the filters match, over all pages")
    next: str | None
    previous: str | None
    results: list[Mem0MemoryOut]
    warnings: list[str] | None = None


class Mem0HistoryEvent(HistoryEvent):
    id: str
    input: list[JSONObject] = Field(description="memcore does not keep the messages: []")
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    app_id: str | None
    categories: list[str]
    metadata: JSONObject | None
    updated_at: str | None


class MessageOut(Out):
    message: str


class DeletedCountOut(Out):
    message: str
    deleted: int


class PingOut(Out):
    status: str
    org_id: str
    project_id: str
    user_email: str | None
