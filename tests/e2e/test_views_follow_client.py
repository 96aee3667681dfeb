"""Issue 37 item 4 through the web API, as the browser calls it: views that follow what happened since the page
loaded. A reward model registered (services, as the CLI does) while the admin's page is open is offered by the
Train tab's Reward and inspector pickers and listed by Admin > Models once the tab is selected; Records' Refresh
lists what the Source filter shown selects (it listed every record while the filter still showed).
(The policy picker: test_train_views_client; the "Run #N queued" notice that goes once its run ended is faded in
the browser, no server event: test_train_form_layout_browser.)"""
from __future__ import annotations

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

SOURCE = "views-follow-source"  # a Source no other e2e test imports
ANY = "(any)"  # the filters' "no filter" (records.filters.ANY)
PROMPTS = ["Views follow: the first filtered prompt", "Views follow: the second filtered prompt"]


def _values(choices) -> list:
    return [choice[1] if isinstance(choice, (list, tuple)) else choice for choice in choices]


def test_a_reward_model_registered_after_the_page_loaded_is_offered_on_tab_select(running_app):
    from labeler.services.serving import models
    from storage import open_db

    admin = Client(running_app.url, auth=running_app.admin, verbose=False)
    _model, reward, inspect, _runs = admin.predict(api_name="/train_choices")  # the page load
    assert "rm:rm-registered-later" not in _values(reward["choices"])
    db = open_db(running_app.db_path)
    try:
        models.register_model(db, "rm-registered-later", running_app.model_dir, "reward")
    finally:
        db.conn.close()
    _model, reward, inspect, _runs = admin.predict(api_name="/train_refresh_choices")  # the Train tab selected
    assert {"rm:rm-registered-later", "mix:rm-registered-later"} <= set(_values(reward["choices"]))
    assert "rm-registered-later" in _values(inspect["choices"])
    table, _base = admin.predict(api_name="/admin_models_view")  # the Admin tab selected
    assert ["rm-registered-later", "reward"] in [row[:2] for row in table["data"]]


def test_records_refresh_keeps_the_source_filter_shown(running_app):
    from labeler.services.data import prompts
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        prompts.add_prompts(db, PROMPTS, source=SOURCE)
    finally:
        db.conn.close()
    admin = Client(running_app.url, auth=running_app.admin, verbose=False)
    loaded = admin.predict(api_name="/records_load")  # the page load: the Source dropdown gets its choices
    assert SOURCE in _values(loaded[6]["choices"])
    everything = int(loaded[1].split("**")[1])
    # project, search text, labelled by, label state, rating bounds, split, source, page: the filters shown.
    filters = [running_app.project, "", ANY, "any", "", "", ANY, SOURCE, 1]
    searched = admin.predict(*filters, api_name="/records_search")
    refreshed = admin.predict(*filters, api_name="/records_refresh")
    sources = {row[3] for row in refreshed[0]["data"]}
    assert sources == {SOURCE} and refreshed[1] == searched[1] == "**2** records · page **1** of **1**"
    assert everything > 2  # the seeded prompts are there too: the filter is what left them out
