"""Every page in headless chromium, against a real daemon: what was remembered is found,
the dreamer's plan and apply and the archive's restore work, the daemon page refreshes.
Each test also takes its page's screenshot (``conftest.SCREENSHOTS``; docs/ui/ for the README).

Covers: ui/app.py ui/views.py
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import MANY, NOTES, OLD_NOTE, TWINS, Ui, screenshot
from trusty_memory.client.sync import Client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_palaces_page_lists_every_palace_with_its_counts(page, ui: Ui):
    assert "token=" not in page.url  # the redirect dropped it from the address bar
    row = page.locator('tr[data-palace="project"]')
    expect(row.locator(".drawers")).to_have_text(str(len(NOTES) + 1))
    expect(row).to_contain_text("writer")  # its worker and role
    expect(page.locator('tr[data-palace="scratch"] .drawers')).to_have_text("1")
    screenshot(page, "palaces")


def test_search_finds_what_was_remembered_in_both_columns(page, ui: Ui):
    page.click("text=project")
    page.fill("input[name=q]", "which port does the staging database use")
    page.click("#search button[type=submit]")
    for column in ("#column-recall", "#column-deep"):
        first = page.locator(f"{column} .hit").first
        expect(first).to_contain_text("PostgreSQL 15 on port 5433")
    # The search is in the address: it can be reloaded and shared.
    assert parse_qs(urlsplit(page.url).query)["q"] == ["which port does the staging database use"]


def test_keyword_search_matches_words_and_phrases_and_pages_by_cursor(page, ui: Ui):
    page.goto(ui.url("/palace/project?q=PostgreSQL+5433"))
    keyword = page.locator("#column-keyword .hit")
    expect(keyword).to_have_count(1)  # only this drawer holds either word
    expect(keyword.first).to_contain_text("PostgreSQL 15 on port 5433")
    expect(keyword.first.locator(".meta")).to_contain_text("BM25")  # its score's kind, no layer
    screenshot(page, "palace-search")  # all three columns answer this one
    page.goto(ui.url('/palace/project?q="rate+limit"&room=infra'))
    expect(page.locator("#column-keyword .hit")).to_have_count(1)
    expect(page.locator("#column-keyword .hit").first).to_contain_text("100 requests per minute")
    page.goto(ui.url("/palace/project?q=notes&until=2022-01-01"))  # the date filter, server-side
    expect(page.locator("#column-keyword .hit")).to_have_count(1)
    expect(page.locator("#column-keyword .hit").first).to_contain_text("retired build server")

    # Cursor paging: every drawer of "many" holds "logs"; three pages, none seen twice.
    page.goto(ui.url("/palace/many?q=logs"))
    seen: list[str] = []
    for size in (10, 10, MANY - 20):
        hits = page.locator("#column-keyword .hit")
        expect(hits).to_have_count(size)
        texts = hits.all_inner_texts()
        assert not set(texts) & set(seen)
        seen += texts
        if len(seen) < MANY:
            page.click("#column-keyword .more")
            expect(hits.first).not_to_have_text(texts[0])  # the next page has been swapped in
    expect(page.locator("#column-keyword .more")).to_have_count(0)
    recall = page.locator("#column-recall .hit").all_inner_texts()
    assert len(recall) == 10  # the other columns kept their first page


def test_filters_and_paging(page, ui: Ui):
    page.goto(ui.url("/palace/project?q=notes&room=code"))
    hits = page.locator("#column-recall .hit")
    expect(hits.first).to_be_visible()
    for text in hits.all_inner_texts():
        assert "code" in text  # only the room asked for
    page.goto(ui.url("/palace/project?q=notes&until=2022-01-01"))
    expect(page.locator("#column-deep .hit").first).to_contain_text("retired build server")
    assert page.locator("#column-deep .hit").count() == 1
    page.goto(ui.url("/palace/project?q=notes"))
    assert page.locator("#column-recall .hit").count() == len(NOTES) + 1
    expect(page.locator("#column-recall .more")).to_have_count(0)  # one page: no next

    # The next page of one column only: the other keeps its first page.
    page.goto(ui.url("/palace/many?q=where+do+services+write+their+logs"))
    first = page.locator("#column-recall .hit").all_inner_texts()
    deep = page.locator("#column-deep .hit").all_inner_texts()
    assert len(first) == len(deep) == 10
    page.click("#column-recall .more")
    expect(page.locator("#column-recall h2")).to_contain_text("page 2")
    second = page.locator("#column-recall .hit").all_inner_texts()
    assert len(second) == 10 and not set(first) & set(second)
    assert page.locator("#column-deep .hit").all_inner_texts() == deep
    page.click("#column-recall .more")
    expect(page.locator("#column-recall h2")).to_contain_text("page 3")
    third = page.locator("#column-recall .hit").all_inner_texts()
    assert len(third) == MANY - 20 and not set(third) & (set(first) | set(second))


def test_drawer_page_shows_every_field_and_its_episode(page, ui: Ui):
    page.goto(ui.url("/palace/project?q=who+owns+billing"))
    page.locator("#column-recall .hit a.content").first.click()
    expect(page.locator("#drawer-content")).to_have_text(NOTES[2][0])
    fields = page.locator("#fields")
    for text in ("people", "owners", "Importance", "Recalled"):
        expect(fields).to_contain_text(text)
    # Written within minutes of each other in other rooms: not its episode. The episode
    # holds its own room's drawers written around it, none here.
    expect(page.locator("#episode .hit.self")).to_have_count(1)
    page.goto(ui.url("/palace/project?room=infra"))
    page.locator("#listing a.content", has_text="rate limit").click()
    expect(page.locator("#episode")).to_contain_text("PostgreSQL 15")  # same room, minutes apart
    expect(page.locator("#episode")).not_to_contain_text(OLD_NOTE[:20])  # years apart
    screenshot(page, "drawer")


def test_kg_timeline_shows_current_and_closed_facts(page, ui: Ui):
    page.goto(ui.url("/palace/project/kg"))
    page.click("#subjects a:text-is('staging database')")
    expect(page.locator("input[name=subject]")).to_have_value("staging database")
    facts = page.locator("#timeline .fact")
    expect(facts).to_have_count(3)
    expect(page.locator("#timeline .fact.closed")).to_contain_text("PostgreSQL 14")
    current = page.locator("#timeline .fact.current")
    expect(current).to_have_count(2)
    expect(current.first).to_contain_text("PostgreSQL 15")
    screenshot(page, "kg-timeline")


def test_dream_plan_then_apply_then_restore_from_the_archive(page, ui: Ui):
    with Client(ui.daemon.config, autostart=False) as client:
        page.goto(ui.url("/dreamer?palace=attic"))
        expect(page.locator("#no-passes")).to_be_visible()
        page.click("#plan-button")
        action = page.locator("#dream-plan tr", has_text=ui.old_drawer[:8])
        expect(action).to_contain_text("archive", timeout=120_000)
        expect(page.locator("#dream-plan tr", has_text="merge")).to_have_count(1)
        assert client.palace_info("attic").archived_count == 0  # a plan changes nothing
        screenshot(page, "dreamer-plan")

        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#apply-button")
        summary = page.locator("#dream-applied .summary")
        expect(summary).to_contain_text(re.compile(r"Merged 1, .*archived 1\b"), timeout=120_000)
        info = client.palace_info("attic")
        assert info.archived_count == 2 and info.drawer_count == 2 and info.last_dream_at
        page.goto(ui.url("/dreamer"))
        expect(page.locator("#passes tr", has_text="attic")).to_contain_text(info.last_dream_at)
        page.goto(ui.url("/dreamer?palace=attic"))  # the palace's own passes, newest first
        recent = page.locator("#recent-passes tbody tr")
        expect(recent.first).to_contain_text(info.last_dream_at)
        expect(recent.first.locator("td").nth(2)).to_have_text("1")  # one merge
        expect(recent.first.locator("td").nth(4)).to_have_text("1")  # one archived

        # The survivor's page names the drawer merged into it; that one's page says where.
        merged = client.call("archive_list", {"reason": "merged"}, palace="attic")["drawers"]
        [twin] = merged
        assert twin["content"] in TWINS
        page.goto(ui.url(f"/palace/attic/drawer/{twin['merged_into']}"))
        expect(page.locator("#merged-here")).to_contain_text(twin["drawer_id"])
        page.goto(ui.url(f"/palace/attic/drawer/{twin['drawer_id']}"))
        expect(page.locator("main")).to_contain_text(f"merged into {twin['merged_into']}")

        page.goto(ui.url("/palace/attic/archive"))
        row = page.locator(f"#archived-{ui.old_drawer}")
        expect(row).to_contain_text("pruned")
        screenshot(page, "archive")
        row.locator("button.restore").click()
        expect(page.locator(f"#archived-{ui.old_drawer}.restored")).to_contain_text("Restored")
        info = client.palace_info("attic")
        assert info.archived_count == 1 and info.drawer_count == 3
        hits = client.recall("attic", "retired build server", top_k=1).results
        assert hits[0].drawer_id == ui.old_drawer


def test_daemon_page_refreshes_itself(page, ui: Ui):
    page.goto(ui.url("/daemon"))
    expect(page.locator("#services")).to_contain_text("palace:project")
    expect(page.locator("#services")).to_contain_text("embedder")
    first = page.locator("#refreshed").inner_text()
    expect(page.locator("#refreshed")).not_to_have_text(first, timeout=15_000)
    screenshot(page, "daemon")
