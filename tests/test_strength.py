"""Memory strength: FSRS-6 maths pinned to the fsrs package, tiers, reviews, archive/restore."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from fsrs import Card, Rating, Scheduler

from memcore.core.errors import InputError, NotFound
from memcore.core.settings import Settings, load_settings
from memcore.search.recall import REVIEWS_PATH
from memcore.search.strength import card_of, strength_of, tier_of, weigh
from memcore.service import MemoryService
from tests.conftest import make_service
from tests.support import FakeEmbedder, write

T0 = dt.datetime(2026, 1, 1, 9, 0, tzinfo=dt.UTC)


def days(n: float) -> dt.datetime:
    return T0 + dt.timedelta(days=n)


def by_the_package(reviews: list[dt.datetime], at: dt.datetime) -> tuple[float, float, float]:
    """Stability, difficulty and retrievability computed with fsrs directly."""
    scheduler = Scheduler(enable_fuzzing=False, learning_steps=(), relearning_steps=())
    card = Card()
    for when in [T0, *reviews]:
        card, _ = scheduler.review_card(card, Rating.Good, when)
    return (
        float(card.stability or 0),
        float(card.difficulty or 0),
        scheduler.get_card_retrievability(card, at),
    )


@pytest.mark.parametrize(
    ("reviews", "at"),
    [
        ([], days(1)),
        ([], days(30)),
        ([days(3)], days(10)),
        ([days(1), days(4), days(12)], days(40)),
        ([days(0.01), days(0.02)], days(5)),  # same-day reviews
    ],
)
def test_strength_matches_the_fsrs_package_on_hand_made_schedules(
    reviews: list[dt.datetime], at: dt.datetime
) -> None:
    got = strength_of("decaying", T0, reviews, at)
    stability, difficulty, recall = by_the_package(reviews, at)
    assert got.stability_days == pytest.approx(stability)
    assert got.difficulty == pytest.approx(difficulty)
    assert got.retrievability == pytest.approx(recall)
    assert got.reviews == 1 + len(reviews)


def test_fsrs6_default_parameters_and_the_shape_of_forgetting() -> None:
    first = card_of(T0, [])
    assert first.stability == pytest.approx(2.3065)  # FSRS-6 w[2]: a first "Good"
    recall = [strength_of("decaying", T0, [], days(d)).retrievability for d in (0, 1, 7, 30)]
    assert recall[0] == 1.0 and recall == sorted(recall, reverse=True) and recall[3] < 0.7
    spaced = strength_of("decaying", T0, [days(2), days(6)], days(40))
    crammed = strength_of("decaying", T0, [days(0.01), days(0.02)], days(40))
    assert spaced.stability_days > 3 * crammed.stability_days
    assert spaced.retrievability > crammed.retrievability


def test_core_never_decays_and_tiers_follow_file_category_and_pin() -> None:
    ten_years = strength_of("core", T0, [], days(3650))
    assert ten_years.retrievability == 1.0 and ten_years.tier == "core"
    assert tier_of("MEMORY.md", None, {}) == "core"
    assert tier_of("memory/users/a/core.md", "core", {}) == "core"
    assert tier_of("memory/notes/x.md", None, {"pinned": True}) == "core"
    assert tier_of("memory/daily/2026-01-01.md", "daily", {}) == "decaying"
    assert tier_of("memory/notes/x.md", None, {"pinned": "no"}) == "decaying"


def test_weight_scales_scores_between_unchanged_and_times_retrievability() -> None:
    assert weigh(0.8, 0.5, 0.0) == 0.8
    assert weigh(0.8, 0.5, 1.0) == pytest.approx(0.4)
    assert weigh(0.8, 0.5, 0.5) == pytest.approx(0.6)
    assert weigh(-0.2, 0.5, 1.0) == -0.2  # a negative cosine is not lifted


async def test_results_carry_strength_and_use_counts_as_a_review(
    vault: Path, service: MemoryService
) -> None:
    (daily,) = await service.memories.add("Standup moved to 10:30", category="daily")
    (core,) = await service.memories.add("Alice is allergic to peanuts", user_id="alice")
    listed = {r.id: r for r in await service.memories.get_all()}
    assert listed[core.id].strength and listed[core.id].strength.tier == "core"
    assert listed[daily.id].strength and listed[daily.id].strength.reviews == 1
    found = await service.memories.search("standup time")
    assert found[0].id == daily.id and found[0].strength is not None
    assert not (vault / REVIEWS_PATH).exists()  # a plain search is not a use
    got = await service.memories.get(daily.id)
    assert got.strength is not None and got.strength.reviews == 2
    await service.context("standup", min_score=0)  # what goes into a prompt is used
    (again,) = await service.memories.reinforce(daily.id)
    assert again.strength is not None and again.strength.reviews == 4
    lines = (vault / REVIEWS_PATH).read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines].count(daily.id) == 3
    assert "retrievability" in again.to_dict()["strength"]  # type: ignore[operator]
    with pytest.raises(NotFound):
        await service.memories.reinforce("m-nope")


async def test_forget_below_archives_weak_memories_and_restore_brings_them_back(
    vault: Path, service: MemoryService
) -> None:
    m = service.memories
    (weak,) = await m.add("Parked in row C today", category="daily", user_id="alice")
    (kept,) = await m.add("Bob's parking spot is C7", category="daily", user_id="bob")
    (core,) = await m.add("Alice drives a blue Golf", user_id="alice")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=60)
    preview = await m.forget_below(0.7, user_id="alice", dry_run=True, now=later)
    assert [r.id for r in preview] == [weak.id] and (vault / weak.path).read_text().count(weak.id)
    gone = await m.forget_below(0.7, user_id="alice", now=later)
    assert [r.id for r in gone] == [weak.id]
    assert weak.id not in (vault / weak.path).read_text()
    archived = vault / "memory/.archive" / weak.path.removeprefix("memory/")
    assert weak.id in archived.read_text() and "Parked in row C today" in archived.read_text()
    assert weak.id not in [r.id for r in await m.search("where did I park", user_id="alice")]
    assert {r.id for r in await m.get_all()} == {kept.id, core.id}  # bob's and core stay
    back = await m.restore(weak.id)
    assert (back.id, back.text, back.created, back.user_id) == (
        weak.id, weak.text, weak.created, "alice"
    )  # fmt: skip
    assert weak.id not in archived.read_text()
    events = [e["event"] for e in await m.history(weak.id)]
    assert events == ["ADD", "ARCHIVE", "RESTORE"]
    with pytest.raises(NotFound):
        await m.restore(weak.id)
    with pytest.raises(InputError):
        await m.forget_below(1.5)


async def test_strength_lives_in_the_vault_and_survives_reindex(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    async with make_service(settings, embedder) as svc:
        (mem,) = await svc.memories.add("Deploys freeze on Fridays", category="process")
        await svc.memories.reinforce(mem.id)
        await svc.memories.reinforce(mem.id)
        before = (await svc.memories.get_all())[0].strength
    shutil.rmtree(vault / ".memcore")
    async with make_service(settings, embedder) as svc:
        await svc.index()
        after = (await svc.memories.get_all())[0].strength
    assert before is not None and after is not None
    assert after.reviews == before.reviews == 3
    assert after.stability_days == pytest.approx(before.stability_days)


async def test_hand_written_notes_decay_by_their_date_and_memory_md_does_not(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "memory/2020-03-01.md", "# Old note\n\nThe office plant needs water weekly.\n")
    write(vault, "MEMORY.md", "# Memory\n\nThe office plant is a fern.\n")
    await service.index()
    found = {r.path: r for r in await service.memories.search("office plant", limit=5)}
    old, core = found["memory/2020-03-01.md"], found["MEMORY.md"]
    assert old.category == "note" and old.strength and old.strength.tier == "decaying"
    assert old.strength.retrievability < 0.5
    assert core.strength and core.strength.tier == "core" and core.strength.retrievability == 1.0


async def test_strength_weight_ranks_a_fading_note_below_a_fresh_one(
    vault: Path, embedder: FakeEmbedder
) -> None:
    old = "# Kettle\n\nHow the kettle is descaled: the kettle is descaled with vinegar.\n"
    write(vault, "memory/2021-05-01.md", old)
    write(vault, "memory/2026-05-01.md", "# Kettle\n\nDescale it with citric acid now.\n")
    as_of = dt.date(2026, 5, 2)
    ranked = {}
    for weight in (0.0, 1.0):
        settings = load_settings(vault, {"strength.weight": weight}, env={})
        async with make_service(settings, embedder) as svc:
            await svc.index()
            result = await svc.search("how is the kettle descaled", limit=2, as_of=as_of)
            ranked[weight] = [h.path for h in result.hits]
            scores = [h.score for h in result.hits]
    assert ranked[0.0][0] == "memory/2021-05-01.md"  # the better match, five years old
    assert ranked[1.0][0] == "memory/2026-05-01.md"  # fades below the fresh one
    assert scores[0] > scores[1]


async def test_a_session_forgets_and_searches_only_its_own_memories(
    service: MemoryService, embedder: FakeEmbedder
) -> None:
    m = service.memories
    (mine,) = await m.add("Draft the Q3 roadmap", run_id="s1", category="todo")
    (theirs,) = await m.add("Draft the Q3 budget", run_id="s2", category="todo")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=90)
    assert await m.forget_by_threshold(0.7, run_id="s1") == []  # fresh: nothing has faded
    assert [r.id for r in await m.forget_below(0.7, run_id="s1", now=later)] == [mine.id]
    assert [r.id for r in await m.get_all()] == [theirs.id]
    vector = (await embedder.embed(["Q3 budget draft"]))[0]
    found = await m.search("", run_id="s2", query_vector=vector)
    assert [r.id for r in found] == [theirs.id]
    assert await m.search("", run_id="s1", query_vector=vector) == []
    with pytest.raises(InputError, match="query_vector"):
        await m.search("x", query_vector=np.zeros(16, dtype=np.float32))


# ---- a policy of one's own: FSRS-6 weights and a run's pace (#55) ------------------------


def test_own_weights_match_the_fsrs_package_with_those_weights() -> None:
    from fsrs.scheduler import DEFAULT_PARAMETERS

    from memcore.search.strength import Policy

    faster = list(DEFAULT_PARAMETERS)
    faster[20] = 0.5  # w20, FSRS-6's decay: a steeper forgetting curve
    policy = Policy(tuple(faster)).checked()
    scheduler = Scheduler(faster, enable_fuzzing=False, learning_steps=(), relearning_steps=())
    card, _ = scheduler.review_card(Card(), Rating.Good, T0)
    got = strength_of("decaying", T0, [], days(20), policy)
    assert got.retrievability == pytest.approx(scheduler.get_card_retrievability(card, days(20)))
    assert got.retrievability != pytest.approx(
        strength_of("decaying", T0, [], days(20)).retrievability
    )


def test_a_run_at_pace_four_is_where_others_are_at_four_times_the_age() -> None:
    from memcore.search.strength import Policy

    policy = Policy(run_pace=4.0)
    reviews = [days(1), days(3)]
    paced = strength_of("decaying", T0, reviews, days(10), policy, pace=4.0)
    # the same history on a clock four times as fast from its birth
    aged = strength_of("decaying", T0, [days(4), days(12)], days(40))
    assert paced.retrievability == pytest.approx(aged.retrievability)
    assert paced.stability_days == pytest.approx(aged.stability_days / 4)  # in real days
    assert paced.last_review == days(3).isoformat(timespec="seconds")  # the real date
    assert policy.pace_of("sess-1") == 4.0 and policy.pace_of(None) == 1.0


async def test_a_sessions_memories_fade_faster_and_bad_weights_are_one_line(
    vault: Path, embedder: FakeEmbedder
) -> None:
    settings = load_settings(vault, {"strength.run_pace": 4.0})
    async with make_service(settings, embedder) as svc:
        (kept,) = await svc.memories.add("Standup is at ten", category="daily", user_id="al")
        (fleeting,) = await svc.memories.add("Standup is at ten", category="daily", run_id="s1")
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=7)
        held = await svc.recall.of_records([kept, fleeting], now=later)
        assert held[fleeting.id].retrievability < held[kept.id].retrievability < 1
        gone = await svc.memories.forget_below(held[kept.id].retrievability - 0.01, now=later)
        assert [r.id for r in gone] == [fleeting.id]  # the daemon's policy follows the pace
    from memcore.core.errors import ConfigError

    weights = ",".join(["100"] * 21)  # every weight out of its bounds
    with pytest.raises(ConfigError, match=r"strength\.parameters: .*out of bounds") as bad:
        async with make_service(load_settings(vault, {"strength.parameters": weights}), embedder):
            pass
    assert "\n" not in str(bad.value)
    with pytest.raises(ConfigError, match="21 finite numbers, got 3"):
        load_settings(vault, {"strength.parameters": "[0.2, 1.2, 2.3]"})
    with pytest.raises(ConfigError, match="run_pace"):
        load_settings(vault, {"strength.run_pace": 0})
