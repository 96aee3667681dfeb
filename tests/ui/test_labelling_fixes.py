"""Issue 14 item 11, in-process: Undo says what it takes back (a skip too), and guidelines have one source per
project and label kind, shown in Admin and reread by Rate and Rank without a reload."""
from __future__ import annotations

from test_tabs import ADMIN, ANNOTATOR, RANK_GUIDELINES, app_db, as_user, ctx, query  # noqa: F401 - fixtures

from labeler.services.data.projects import DEFAULT_GUIDELINES
from labeler.ui import header
from labeler.ui.tabs import admin, labelling, rank, rate
from labeler.ui.tabs.admin import project_settings
from labeler.ui.tabs.admin.snapshot import SHOWN


def test_rate_undo_takes_back_a_skip_and_says_so(app_db, capsys, ctx):
    first = rate.next_item(ctx, request=as_user(ANNOTATOR))
    second = rate.skip(ctx, first[6], request=as_user(ANNOTATOR))
    assert second[3] != first[3]
    capsys.readouterr()
    back = rate.undo(ctx, request=as_user(ANNOTATOR))  # gr.Info prints outside a running server
    item_id = int(first[6].split(":")[0])
    assert capsys.readouterr().out.strip() == "Undid your last skip: that item is back, rate it or skip it again."
    assert back[3] == first[3]  # the skipped answer is shown again
    assert query(app_db, "SELECT status FROM assignments WHERE item_id = ?", [item_id]) == [("pending",)]
    # Scored, then undone: the message names the score.
    rate.submit(ctx, 4, "", back[6], request=as_user(ANNOTATOR))
    rate.undo(ctx, request=as_user(ANNOTATOR))
    assert capsys.readouterr().out.strip() == "Undid your last score: that item is back, rate it again."
    rate.undo(ctx, request=as_user(ANNOTATOR))
    assert capsys.readouterr().out.strip() == "Nothing to undo."


def test_rank_undo_takes_back_a_skip_and_says_so(app_db, capsys, ctx):
    first = rank.next_item(ctx, request=as_user(ANNOTATOR))
    rank.skip(ctx, first[-2], request=as_user(ANNOTATOR))
    capsys.readouterr()
    back = rank.undo(ctx, request=as_user(ANNOTATOR))
    item_id = first[-2]["item_id"]
    assert capsys.readouterr().out.strip() == "Undid your last skip: that item is back, rank it or skip it again."
    assert back[-2] == first[-2]


def test_guidelines_one_text_per_kind_shown_in_admin_and_reread_by_rate_and_rank(app_db, ctx):
    """The selects' wiring (quiet, no progress overlay) and the output positions read here: test_tabs.WIRED."""
    rating_default, ranking_default = DEFAULT_GUIDELINES["rating"], DEFAULT_GUIDELINES["ranking"]
    assert rating_default != ranking_default
    boxes = [SHOWN.index("guidelines"), SHOWN.index("ranking_guidelines")]
    # Admin shows the texts annotators see now: the defaults in full, not an empty box.
    snapshot = admin.refresh(ctx, request=as_user(ADMIN))
    assert [snapshot[i] for i in boxes] == [rating_default, ranking_default]
    assert rate.next_item(ctx, request=as_user(ANNOTATOR))[-1] == rating_default
    ranked = rank.next_item(ctx, request=as_user(ANNOTATOR))
    assert ranked[RANK_GUIDELINES] == ranking_default  # not the rating text

    # Saved unchanged, the defaults stay defaults ("" in the database); then new texts per kind.
    project_settings.save_project(ctx, 1, 7, 1, rating_default, ranking_default, request=as_user(ADMIN))
    assert query(app_db, "SELECT guidelines, ranking_guidelines FROM projects") == [("", "")]
    snapshot = project_settings.save_project(ctx, 1, 7, 1, "Rate **strictly**.", "Rank **carefully**.",
                                             request=as_user(ADMIN))
    assert [snapshot[i] for i in boxes] == ["Rate **strictly**.", "Rank **carefully**."]
    # Without a reload: selecting the tab rereads them (and so does the next ranking item).
    assert labelling.guidelines(ctx, "rating", request=as_user(ANNOTATOR)) == "Rate **strictly**."
    assert labelling.guidelines(ctx, "ranking", request=as_user(ANNOTATOR)) == "Rank **carefully**."
    assert rank.next_item(ctx, request=as_user(ANNOTATOR))[RANK_GUIDELINES] == "Rank **carefully**."
    # An API caller sending the four older fields leaves the ranking text alone; emptied, a box is the default.
    project_settings.save_project(ctx, 1, 7, 1, "", request=as_user(ADMIN))
    assert query(app_db, "SELECT guidelines, ranking_guidelines FROM projects") == [("", "Rank **carefully**.")]
    assert labelling.guidelines(ctx, "rating", request=as_user(ANNOTATOR)) == rating_default


def test_first_steps_panel_for_an_admin_until_the_project_has_prompts_and_labels(app_db, ctx):
    # Prompts and answers but no labels yet: the panel, with the first two steps ticked.
    steps = header.first_steps(ctx, request=as_user(ADMIN))
    assert steps["visible"] is True
    lines = steps["value"].splitlines()
    assert [line[:3] for line in lines[1:5]] == ["- ✅", "- ✅", "- ⬜", "- ⬜"]
    assert "**Import prompts**" in lines[1] and "(2 so far)" in lines[1] and "**Train**" in lines[4]
    # Never for an annotator.
    assert header.first_steps(ctx, request=as_user(ANNOTATOR)) == {"__type__": "update", "visible": False}
    first = rate.next_item(ctx, request=as_user(ANNOTATOR))
    rate.submit(ctx, 4, "", first[6], request=as_user(ANNOTATOR))
    assert header.first_steps(ctx, request=as_user(ADMIN)) == {"__type__": "update", "visible": False}


def test_first_steps_on_an_empty_project_tick_nothing():
    text = header.first_steps_markdown({"prompts": 0, "responses": 0, "ratings": 0, "rankings": 0}, "default")
    assert text.count("- ⬜") == 4 and "✅" not in text and "Data > 1. Prompts" in text
