"""Search filters, memory queries and Mem0-style metadata filters as SQL WHERE clauses, in the
dialect of each SQL adapter (SQLite's ``?`` and JSON1, PostgreSQL's ``%s`` and jsonb). Pure.

Every clause expects the chunk table as ``c`` and the memories table as ``m``; the values go
in as parameters, never into the SQL text.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memcore.core.errors import InputError
from memcore.core.ids import folder_name
from memcore.core.models import SCOPE_KEYS, TURNS_CATEGORY, MemoryQuery, SearchFilters
from memcore.core.moments import utc_moment


@dataclass(frozen=True, slots=True)
class Dialect:
    mark: str  # a parameter placeholder
    never: str  # a condition that is always false
    prefix: str  # c.source_file starts with a string: two parameters (length, prefix)
    tag: str  # one of c.tags, lowercased, equals a parameter
    json_value: Callable[[str], str]  # a JSON column's value at a key given as a parameter
    json_text: Callable[[str], str]  # the same value as text (a string without its quotes)
    holds: str  # "text {} holds a parameter as a substring" (case-sensitive), with {} the text
    json_key: Callable[[str], object]  # the key parameter for a metadata key
    json_arg: Callable[[object], object]  # a comparison value as a parameter
    arg_mark: str  # the placeholder of a comparison value
    distinct: str  # "not equal, NULL counting as a value"
    file_range: str  # c.source_file in [low, high), byte order: two parameters
    any_of: str  # "is one of a list": one parameter, the list (see as_list)
    none_of: str  # "is none of a list": the same
    as_list: Callable[[list[str]], object]  # that parameter
    json_any_of: str  # a JSON value "is one of" a JSON array given as one parameter

    def marks(self, n: int) -> str:
        return ",".join([self.mark] * n)


SQLITE = Dialect(
    mark="?",
    never="0",
    prefix="substr(c.source_file, 1, ?) = ?",
    tag="EXISTS (SELECT 1 FROM json_each(c.tags) WHERE lower(value) = ?)",
    json_value=lambda column: f"json_extract({column}, ?)",
    json_text=lambda column: f"CAST(json_extract({column}, ?) AS TEXT)",
    holds="instr({}, ?) > 0",
    json_key=lambda key: "$." + json.dumps(key, ensure_ascii=False),
    json_arg=lambda value: value,
    arg_mark="?",
    distinct="IS NOT",
    file_range="c.source_file >= ? AND c.source_file < ?",
    any_of="IN (SELECT value FROM json_each(?))",
    none_of="NOT IN (SELECT value FROM json_each(?))",
    as_list=lambda values: json.dumps(values, ensure_ascii=False),
    json_any_of="IN (SELECT value FROM json_each(?))",
)
# JSON null reads as SQL NULL, as SQLite's json_extract does, so both answer alike.
POSTGRES = Dialect(
    mark="%s",
    never="false",
    prefix="left(c.source_file, %s) = %s",
    tag="EXISTS (SELECT 1 FROM jsonb_array_elements_text(c.tags::jsonb) t(v) "
    "WHERE lower(t.v) = %s)",
    json_value=lambda column: f"NULLIF(({column})::jsonb -> %s, 'null'::jsonb)",
    json_text=lambda column: f"(({column})::jsonb ->> %s)",
    holds="strpos({}, %s) > 0",
    json_key=lambda key: key,
    json_arg=lambda value: json.dumps(value, ensure_ascii=False),
    arg_mark="%s::jsonb",
    distinct="IS DISTINCT FROM",
    file_range='c.source_file COLLATE "C" >= %s AND c.source_file COLLATE "C" < %s',
    any_of="= ANY(%s)",
    none_of="<> ALL(%s)",
    as_list=list,
    json_any_of="IN (SELECT jsonb_array_elements(%s::jsonb))",
)


def filter_sql(filters: SearchFilters, d: Dialect) -> tuple[str, list[object]]:
    """`` AND ...`` restricting chunks ``c`` to the filters ("" when there are none)."""
    clauses: list[str] = []
    params: list[object] = []
    if filters.path_prefix:
        clauses.append(d.prefix)
        params += [len(filters.path_prefix), filters.path_prefix]
    if filters.tag:
        clauses.append(d.tag)
        params.append(filters.tag.lstrip("#").lower())
    if filters.date_from:
        clauses.append(f"c.date >= {d.mark}")
        params.append(filters.date_from)
    if filters.date_to:
        clauses.append(f"c.date <= {d.mark}")
        params.append(filters.date_to)
    if filters.about_memories:
        clause, more = scope_sql(filters, d)
        clauses.append(clause)
        params += more
    if not filters.include_turns and filters.category != TURNS_CATEGORY:
        clauses.append(
            "NOT EXISTS (SELECT 1 FROM memories mt WHERE mt.chunk_id = c.id "
            f"AND mt.category = {d.mark})"
        )
        params.append(TURNS_CATEGORY)
    return (" AND " + " AND ".join(clauses) if clauses else ""), params


_FOLDERS = ("apps", "users", "agents", "runs")  # outermost first, as Scope.folder writes them
_KINDS = {"app_id": "apps", "user_id": "users", "agent_id": "agents", "run_id": "runs"}


_LEGACY = re.compile(r"[^\W_][\w.\-@]{0,127}")  # the names ids were held to before any text


def _like(text: str) -> str:
    """``text`` as a LIKE pattern matching itself (with ESCAPE '!')."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def folder_patterns(f: SearchFilters) -> list[str]:
    """LIKE patterns (ESCAPE '!') of the paths of notes inside the scope's folders: a user's
    notes are under memory/users/<u>/, an agent's under memory/agents/<a>/ or
    memory/users/*/agents/<a>/, a run's under .../runs/<r>/ at any of those levels, each of
    them under memory/apps/<x>/ too (an app's own: only under it). Ids as ``folder_name``
    encodes them."""
    given = {kind: v for key, kind in _KINDS.items() if (v := getattr(f, key))}
    patterns = [""]
    for kind in _FOLDERS:
        value = given.get(kind)
        if value is not None:
            names = {folder_name(value)}
            if _LEGACY.fullmatch(value) and ".." not in value:
                names.add(value)  # its folder before ids were encoded (memory/users/Alice/)
            patterns = [f"{p}{kind}/{_like(n)}/" for p in patterns for n in sorted(names)]
        elif any(_FOLDERS.index(k) > _FOLDERS.index(kind) for k in given):
            # the scope names a deeper level only: this level may be there or not
            patterns = [q for p in patterns for q in (p, f"{p}{kind}/%/")]
    return [f"memory/{p}%" for p in patterns]


NOT_A_MEMORY = "NOT EXISTS (SELECT 1 FROM memories mm WHERE mm.chunk_id = c.id)"


def _like_parts(pattern: str) -> list[tuple[str, bool]]:
    """A LIKE pattern (ESCAPE '!') as (character, is a wildcard) pairs."""
    parts: list[tuple[str, bool]] = []
    escaped = False
    for ch in pattern:
        if escaped:
            parts.append((ch, False))
            escaped = False
        elif ch == "!":
            escaped = True
        else:
            parts.append((ch, ch in "%_"))
    return parts


def _prefix_range(pattern: str) -> tuple[str, str]:
    """The range of file paths a LIKE pattern (ESCAPE '!') can match: [its literal start,
    that start with its last character one higher)."""
    literal = []
    for ch, wild in _like_parts(pattern):
        if wild:
            break
        literal.append(ch)
    low = "".join(literal)
    return low, low[:-1] + chr(ord(low[-1]) + 1)


def like_matches(pattern: str, text: str) -> bool:
    """Whether ``text`` matches a LIKE pattern (ESCAPE '!'), case kept: a path in hand held
    to the scope folders ``folder_patterns`` gives the SQL."""
    regex = "".join(
        (".*" if ch == "%" else ".") if wild else re.escape(ch) for ch, wild in _like_parts(pattern)
    )
    return re.fullmatch(regex, text) is not None


def scope_sql(f: SearchFilters, d: Dialect) -> tuple[str, list[object]]:
    """Chunks a search may see: with a scope, the scope's memories and the notes in its
    folders, plus shared context (unscoped notes and memories) with ``include_shared``.
    Category/metadata filters keep only memories."""
    scope = [(f"m.{n} = {d.mark}", v) for n in SCOPE_KEYS if (v := getattr(f, n))]
    extra: list[tuple[str, list[object]]] = []
    if f.category is not None:
        extra.append((f"m.category = {d.mark}", [f.category]))
    if f.metadata:
        extra.append(metadata_sql(f.metadata, d))
    conds = [c for c, _ in scope] + [c for c, _ in extra]
    extra_params = [p for _, ps in extra for p in ps]
    params: list[object] = [v for _, v in scope] + extra_params
    mine = f"c.id IN (SELECT m.chunk_id FROM memories m WHERE {' AND '.join(conds) or '1=1'})"
    if not f.scoped:
        return mine, params
    parts, out = [mine], list(params)
    if f.include_shared:
        shared_conds = " AND ".join([*(f"m.{n} IS NULL" for n in SCOPE_KEYS),
                                     *(c for c, _ in extra)])  # fmt: skip
        parts.append(f"c.id IN (SELECT m.chunk_id FROM memories m WHERE {shared_conds})")
        out += extra_params
    if not extra and not f.memories_only:  # notes: the scope's own, and shared ones if asked
        # each folder a range of the file index, then the pattern: a scope's notes are read
        # from its folders, not found by testing every chunk of the vault
        for pattern in folder_patterns(f):
            low, high = _prefix_range(pattern)
            parts.append(f"({NOT_A_MEMORY} AND {d.file_range} AND c.source_file LIKE "
                         f"{d.mark} ESCAPE '!')")  # fmt: skip
            out += [low, high, pattern]
        if f.include_shared:
            outside = " AND ".join([f"c.source_file NOT LIKE {d.mark}"] * len(_FOLDERS))
            parts.append(f"({NOT_A_MEMORY} AND {outside})")
            out += [f"memory/{kind}/%" for kind in _FOLDERS]
    return "(" + " OR ".join(parts) + ")", out


def scope_selects(f: SearchFilters, d: Dialect) -> list[tuple[str, list[object]]] | None:
    """The chunks of a scope (``scope_sql`` without shared context) as queries of their ids,
    each driven by an index: the scope's memories by its columns, its notes by the ranges of
    its folders. A planner that cannot OR those paths reads them one by one. None when the
    filter has no scope or takes shared context too."""
    if not f.scoped or f.include_shared:
        return None
    conds, params = [], []
    for n in SCOPE_KEYS:
        if value := getattr(f, n):
            conds.append(f"m.{n} = {d.mark}")
            params.append(value)
    if f.category is not None:
        conds.append(f"m.category = {d.mark}")
        params.append(f.category)
    if f.metadata:
        sql, more = metadata_sql(f.metadata, d)
        conds.append(sql)
        params += more
    out = [(f"SELECT m.chunk_id FROM memories m WHERE {' AND '.join(conds)}", params)]
    if f.category is None and not f.metadata and not f.memories_only:
        for pattern in folder_patterns(f):
            low, high = _prefix_range(pattern)
            out.append((
                f"SELECT c.id FROM memory_chunks c WHERE {d.file_range} AND c.source_file "
                f"LIKE {d.mark} ESCAPE '!' AND {NOT_A_MEMORY}", [low, high, pattern],
            ))  # fmt: skip
    return out


def unscoped(f: SearchFilters) -> SearchFilters:
    """The filters without their scope, category and metadata (see ``scope_selects``)."""
    return dataclasses.replace(
        f, user_id=None, agent_id=None, run_id=None, app_id=None, category=None, metadata=None,
        memories_only=False,
    )  # fmt: skip


_OPS = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
# Mem0 filter keys that are the memory's own fields, not its metadata (m = the memories table)
COLUMNS = {"user_id": "user_id", "agent_id": "agent_id", "run_id": "run_id", "app_id": "app_id",
           "created_at": "created", "updated_at": "updated", "timestamp": "created",
           "categories": "category", "category": "category", "memory_ids": "memory_id",
           "id": "memory_id"}  # fmt: skip
TIMES = ("created_at", "updated_at", "timestamp")
MAX_PARAMS = 30_000  # under SQLite's 32,766 and PostgreSQL's 65,535 parameters a query


def metadata_sql(
    spec: Mapping[str, object], d: Dialect, column: str = "m.metadata", fields: bool = True
) -> tuple[str, list[object]]:
    """A Mem0-style filter as SQL: ``AND`` / ``OR`` / ``NOT`` over conditions, each on a
    metadata key (``{"topic": "travel"}``, ``{"score": {"gte": 3}}``) or, with ``fields``, on
    the memory's own fields (``user_id``, ``agent_id``, ``run_id``, ``app_id``,
    ``created_at``, ``updated_at``, ``timestamp``, ``categories``, ``memory_ids``) or its text
    (``keywords``); ``{"metadata": {...}}`` holds metadata keys only. Operators: eq, ne, gt,
    gte, lt, lte, in, nin, contains, icontains, and ``"*"`` for any non-empty value. An
    operator it does not know is an InputError naming it, never ignored. Any width: an OR of
    plain values of one key is one list, and long ANDs and ORs nest as balanced trees."""
    sql, params = _spec_sql(spec, d, column, fields)
    if len(params) > MAX_PARAMS:
        raise InputError(
            f"the filter holds {len(params):,} values, over {MAX_PARAMS:,}: put the values of "
            "one key in one 'in' list"
        )
    return sql, params


def _spec_sql(spec: object, d: Dialect, column: str, fields: bool) -> tuple[str, list[object]]:
    if not isinstance(spec, Mapping) or not spec:
        raise InputError("a metadata filter must be a non-empty JSON object")
    parts: list[tuple[str, list[object]]] = []
    for key, value in spec.items():
        if key in ("AND", "OR", "NOT"):
            subs = _logic(str(key), value, d, column, fields)
            sql = _balanced([q for q, _ in subs], " OR " if key == "OR" else " AND ")
            # a condition on a missing value is unknown (NULL), and NOT of it unknown too:
            # NOT {"agent_id": "coach"} must keep the memories without an agent
            parts.append((
                f"NOT COALESCE({sql}, {d.never})" if key == "NOT" else sql,
                [p for _, ps in subs for p in ps],
            ))  # fmt: skip
        elif key == "metadata" and isinstance(value, Mapping):
            parts.append(_spec_sql(value, d, column, fields=False))
        elif fields and key == "keywords":
            table = column.split(".")[0]
            text = f"(SELECT kc.content FROM memory_chunks kc WHERE kc.id = {table}.chunk_id)"
            parts.append(_field_sql(text, "keywords", value, d))
        elif fields and key in COLUMNS:
            parts.append(
                _field_sql(f"{column.split('.')[0]}.{COLUMNS[str(key)]}", str(key), value, d)
            )
        else:
            parts.append(_json_sql(column, str(key), value, d))
    sql = _balanced([q for q, _ in parts], " AND ")
    return sql, [p for _, ps in parts for p in ps]


def _balanced(parts: list[str], joint: str) -> str:
    """``parts`` joined by AND or OR as a balanced tree of parentheses: SQLite refuses an
    expression deeper than 1,000, and a flat chain of 1,000 ORs is that deep."""
    if len(parts) <= 8:
        return "(" + joint.join(parts) + ")"
    half = len(parts) // 2
    return "(" + _balanced(parts[:half], joint) + joint + _balanced(parts[half:], joint) + ")"


def _logic(
    key: str, value: object, d: Dialect, column: str, fields: bool
) -> list[tuple[str, list[object]]]:
    items = [value] if key == "NOT" and isinstance(value, Mapping) else value
    if not isinstance(items, list) or not items:
        raise InputError(f"filter {key} needs a non-empty list of filters")
    if key == "OR":
        items = _lists(items)
    return [_spec_sql(v, d, column, fields) for v in items]


def _lists(items: list[object]) -> list[object]:
    """An OR's plain conditions on one key (``{"user_id": "a"}, {"user_id": "b"}``) as one
    ``in`` list, in the place of the first; the rest as they are."""
    by_key: dict[str, list[object]] = {}
    for item in items:
        if isinstance(item, Mapping) and len(item) == 1:
            ((key, value),) = item.items()
            if (
                key not in ("AND", "OR", "NOT", "metadata", "keywords")
                and _scalar(value)
                and (value is not None and value != "*")
            ):
                by_key.setdefault(str(key), []).append(value)
    out: list[object] = []
    done: set[str] = set()
    for item in items:
        key = next(iter(item)) if isinstance(item, Mapping) and len(item) == 1 else None
        if key is None or key not in by_key or len(by_key[key]) < 2:
            out.append(item)
        elif key not in done:
            done.add(key)
            out.append({key: {"in": by_key[key]}})
    return out


def _conditions(key: str, value: object) -> list[tuple[str, object]]:
    if value == "*":
        return [("*", None)]
    if isinstance(value, Mapping):
        if not value:
            raise InputError(f"filter {key} has no operator")
        return [(str(op), arg) for op, arg in value.items()]
    if isinstance(value, list) and key in ("memory_ids", "id"):
        return [("in", value)]  # Mem0's {"memory_ids": ["m-1", "m-2"]}
    return [("eq", value)]


def _json_sql(column: str, key: str, value: object, d: Dialect) -> tuple[str, list[object]]:
    """Conditions on one metadata key."""
    parts: list[str] = []
    params: list[object] = []
    target = d.json_value(column)
    for op, arg in _conditions(key, value):
        if op == "*":  # a value, and not an empty text
            parts.append(f"({target} IS NOT NULL AND {d.json_text(column)} <> '')")
            params += [d.json_key(key), d.json_key(key)]
        elif op in ("in", "nin"):
            if not isinstance(arg, list) or not arg or not all(map(_scalar, arg)):
                raise InputError(f"metadata filter {key}.{op} needs a list of plain values")
            parts.append(f"{target} {'NOT ' if op == 'nin' else ''}{d.json_any_of}")
            params += [d.json_key(key), json.dumps(arg, ensure_ascii=False)]
        elif op in ("contains", "icontains") and isinstance(arg, str):
            sql, arg = _holds(d, d.json_text(column), op, arg)
            parts.append(sql)
            params += [d.json_key(key), arg]
        elif (op in _OPS or op == "ne") and _scalar(arg):
            sign = d.distinct if op == "ne" else _OPS[op]
            parts.append(f"{target} {sign} {d.arg_mark}")
            params += [d.json_key(key), d.json_arg(arg)]
        else:
            raise InputError(f"metadata filter {key}: unsupported {op!r} or value {arg!r}")
    return "(" + " AND ".join(parts) + ")", params


def _field_sql(field: str, key: str, value: object, d: Dialect) -> tuple[str, list[object]]:
    """Conditions on one of the memory's own text fields (scope names, category, dates,
    id), or on its text (``keywords``: contains / icontains)."""
    parts: list[str] = []
    params: list[object] = []
    for op, arg in _conditions(key, value):
        if key in TIMES and op in ("eq", "ne") and isinstance(arg, str) and len(arg) == 10:
            _, high = _time_bound(key, "lte", arg)  # a day: from its start to the next's
            parts.append(
                f"({field} >= {d.mark} AND {field} < {d.mark})"
                if op == "eq"
                else f"({field} IS NULL OR {field} < {d.mark} OR {field} >= {d.mark})"
            )
            params += [arg, high]
            continue
        if key in TIMES and op not in ("*", "in", "nin"):
            op, arg = _time_bound(key, op, arg)
        if op == "*":
            parts.append(f"({field} IS NOT NULL AND {field} <> '')")
        elif key == "keywords" and op not in ("contains", "icontains"):
            raise InputError(f"filter keywords: use contains or icontains, not {op!r}")
        elif op in ("in", "nin") and isinstance(arg, list) and arg:
            if not all(isinstance(a, str) for a in arg):
                raise InputError(f"filter {key}.{op} needs a list of names")
            parts.append(f"{field} {d.none_of if op == 'nin' else d.any_of}")
            params.append(d.as_list(list(arg)))
        elif op in ("contains", "icontains") and isinstance(arg, str) and key == "categories":
            parts.append(f"{field} = {d.mark}")  # a memory has one category
            params.append(arg)
        elif op in ("contains", "icontains") and isinstance(arg, str):
            sql, arg = _holds(d, field, op, arg)
            parts.append(sql)
            params.append(arg)
        elif (op in _OPS or op == "ne") and isinstance(arg, str):
            parts.append(f"{field} {d.distinct if op == 'ne' else _OPS[op]} {d.mark}")
            params.append(arg)
        else:
            raise InputError(f"filter {key}: unsupported {op!r} or value {arg!r}")
    return "(" + " AND ".join(parts) + ")", params


def _holds(d: Dialect, text: str, op: str, arg: str) -> tuple[str, str]:
    """``text`` holds ``arg``: as it is (contains) or ignoring case (icontains; SQLite folds
    the case of ASCII letters only)."""
    if op == "icontains":
        return d.holds.format(f"lower({text})"), arg.lower()
    return d.holds.format(text), arg


def _time_bound(key: str, op: str, value: object) -> tuple[str, object]:
    """A comparison with a stored time (ISO 8601 in UTC, to the second), its value checked and
    written the same way: Unix seconds or an ISO time; a bare date takes whole days ("lte
    2024-05-31" is lt the next day, "gt 2024-05-31" starts the day after). Anything else is
    an InputError naming the value (never a comparison of text with text)."""
    if op not in _OPS and op != "ne":
        return op, value
    bad = InputError(f"filter {key}.{op}: {value!r} is not a date like 2024-05-31, an ISO time "
                     "or Unix seconds")  # fmt: skip
    try:
        if isinstance(value, str) and len(value) == 10:
            following = (dt.date.fromisoformat(value) + dt.timedelta(days=1)).isoformat()
            return {"lte": ("lt", following), "gt": ("gte", following)}.get(op, (op, value))
        return op, utc_moment(value)
    except ValueError:
        raise bad from None


def memory_query_sql(q: MemoryQuery, d: Dialect) -> tuple[str, list[object]]:
    """`` AND ...`` restricting memories ``m`` (joined to chunks ``c``) to a query."""
    clauses: list[str] = []
    params: list[object] = []
    for name in (*SCOPE_KEYS, "category", "key", "path"):
        value = getattr(q, name)
        if value is not None:
            clauses.append(f"m.{name} = {d.mark}")
            params.append(value)
    if q.ids is not None:  # one parameter, however many ids (a batch reads back 100,000)
        clauses.append(f"m.memory_id {d.any_of}" if q.ids else d.never)
        params += [d.as_list(list(q.ids))] if q.ids else []
    if q.tag:
        clauses.append(d.tag)
        params.append(q.tag.lstrip("#").lower())
    if not q.include_turns and q.category is None and q.ids is None:
        clauses.append(f"m.category <> {d.mark}")
        params.append(TURNS_CATEGORY)
    if q.metadata:
        sql, more = metadata_sql(q.metadata, d)
        clauses.append(sql)
        params += more
    if q.after is not None:  # the first comparison is the one memories_created serves
        clauses.append(
            f"(m.created, m.path) >= ({d.marks(2)}) AND "
            f"(m.created, m.path, c.start_line, m.memory_id) > ({d.marks(4)})"
        )
        params += [*q.after[:2], *q.after]
    if q.expired is not None:  # an expiry date is the last day a memory is read
        clauses.append(f"m.expires < {d.mark}" if q.expired else
                       f"(m.expires IS NULL OR m.expires >= {d.mark})")  # fmt: skip
        params.append(q.today)
    return (" AND " + " AND ".join(clauses) if clauses else ""), params


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
