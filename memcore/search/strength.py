"""Memory strength: FSRS-6 stability, difficulty and retrievability from a review history. Pure.

A memory is born with one review (its creation) and gains one each time it is used: put in a
context block, read with ``get``, or reinforced explicitly. Every such review is rated Good;
feedback rates one Easy (useful), Hard (not useful) or Again (wrong: a lapse, it fades fast). FSRS-6
(the maintained ``fsrs`` package, default parameters) turns the dates into stability (days
until recall falls to 90%) and retrievability now. Reviews on the same day barely move
stability; reviews spread over days grow it, as spaced repetition does for people.

``core`` memories never decay: MEMORY.md, the ``core`` category, and anything marked
``pinned: true`` (front matter or metadata) keep retrievability 1.0 and are never forgotten.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from fsrs import Card, Rating, Scheduler
from fsrs.scheduler import DEFAULT_PARAMETERS

from memcore.core.errors import ConfigError
from memcore.core.models import Strength, Tier

CORE_FILES = frozenset({"MEMORY.md", "memory.md"})
AGAIN, HARD, GOOD, EASY = 1, 2, 3, 4  # FSRS grades
Review = dt.datetime | tuple[dt.datetime, int]  # a bare time is a Good review


def _graded(review: Review) -> tuple[dt.datetime, int]:
    return (review, GOOD) if isinstance(review, dt.datetime) else review


@dataclass(frozen=True, slots=True)
class Policy:
    """How memories decay: FSRS-6's weights (empty: the package's defaults) and how many
    times as fast a run's memories age (``strength.parameters``, ``strength.run_pace``)."""

    parameters: tuple[float, ...] = ()
    run_pace: float = 1.0

    def checked(self) -> Policy:
        """This policy, its weights checked by fsrs: ConfigError (one line) when out of
        bounds."""
        try:
            _scheduler(self.parameters)
        except ValueError as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise ConfigError(f"strength.parameters: {'; '.join(lines)}") from None
        return self

    def pace_of(self, run_id: str | None) -> float:
        return self.run_pace if run_id else 1.0


DEFAULT = Policy()


@lru_cache(maxsize=8)
def _scheduler(parameters: tuple[float, ...] = ()) -> Scheduler:
    # No fuzzing (the same history must give the same strength on every machine) and no
    # learning steps (a memory is not a flash card being drilled within minutes).
    return Scheduler(
        parameters or DEFAULT_PARAMETERS, enable_fuzzing=False, learning_steps=(),
        relearning_steps=(),
    )  # fmt: skip


def tier_of(path: str, category: str | None, metadata: Mapping[str, object]) -> Tier:
    """core for MEMORY.md, the core category and pinned items; decaying otherwise."""
    pinned = metadata.get("pinned") is True or str(metadata.get("pinned")).lower() == "true"
    if path in CORE_FILES or category == "core" or pinned:
        return "core"
    return "decaying"


def card_of(
    born: dt.datetime, reviews: Sequence[Review], parameters: tuple[float, ...] = ()
) -> Card:
    """The FSRS card after the creation review and every later review, in time order."""
    scheduler = _scheduler(parameters)
    card, _ = scheduler.review_card(Card(card_id=0), Rating.Good, _utc(born))
    for at, grade in sorted((_utc(t), g) for t, g in map(_graded, reviews)):
        last = card.last_review or at
        # a review dated before the last one (a skewed clock) counts as made at the last one
        card, _ = scheduler.review_card(card, Rating(grade), max(at, last))
    return card


def _paced(born: dt.datetime, at: dt.datetime, pace: float) -> dt.datetime:
    """``at`` on a clock that runs ``pace`` times as fast from ``born`` on."""
    if pace == 1.0:
        return at
    return _utc(born) + (_utc(at) - _utc(born)) * pace


def strength_of(
    tier: Tier,
    born: dt.datetime,
    reviews: Sequence[Review],
    now: dt.datetime,
    policy: Policy = DEFAULT,
    pace: float = 1.0,
) -> Strength:
    """Strength at ``now``. Core memories report retrievability 1.0 whatever their age.
    ``pace``: the memory ages that many times as fast (its reviews and now, on a clock that
    runs faster from its birth); ``last_review`` stays the real date."""
    graded = [_graded(r) for r in reviews]
    card = card_of(born, [(_paced(born, t, pace), g) for t, g in graded], policy.parameters)
    last = max([_utc(born), *(_utc(t) for t, _ in graded)])  # the real date, not the paced
    at = _paced(born, now, pace)
    recall = 1.0 if tier == "core" else retrievability(card, at, policy.parameters)
    return Strength(
        tier=tier,
        retrievability=recall,
        stability_days=float(card.stability or 0.0) / pace,  # in real days
        difficulty=float(card.difficulty or 0.0),
        last_review=last.isoformat(timespec="seconds"),
        reviews=1 + len(reviews),
    )


def recall_curve(
    tier: Tier,
    born: dt.datetime,
    reviews: Sequence[Review],
    now: dt.datetime,
    ahead_days: float = 60.0,
    points: int = 60,
    policy: Policy = DEFAULT,
    pace: float = 1.0,
) -> list[tuple[dt.datetime, float]]:
    """Retrievability from the memory's birth to ``ahead_days`` past ``now``, at ``points``
    evenly spaced times: each review lifts it, time lowers it (core memories stay at 1.0);
    under ``policy`` and at ``pace``, as ``strength_of`` reckons it."""
    start, end = _utc(born), _utc(now) + dt.timedelta(days=ahead_days)
    graded = sorted((_utc(t), g) for t, g in map(_graded, reviews))
    out = []
    for n in range(points):
        at = start + (end - start) * n / max(1, points - 1)
        seen = [(t, g) for t, g in graded if t <= at]
        out.append((at, strength_of(tier, born, seen, at, policy, pace).retrievability))
    return out


def retrievability(card: Card, now: dt.datetime, parameters: tuple[float, ...] = ()) -> float:
    """FSRS-6 probability of recall at ``now`` (1.0 at or before the last review)."""
    now = _utc(now)
    if card.last_review is None or now <= card.last_review:
        return 1.0
    return float(_scheduler(parameters).get_card_retrievability(card, now))


def weigh(score: float, recall: float, weight: float) -> float:
    """A fused score scaled by strength: unchanged at weight 0, x retrievability at 1."""
    return score * ((1.0 - weight) + weight * recall) if score >= 0 else score


def parse_time(value: str | None) -> dt.datetime | None:
    """An ISO date or datetime as an aware UTC datetime; None when absent or unreadable."""
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return _utc(parsed)


def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
