"""Issue 37 items 4 and 5 through the web API, as the browser calls them: the Train tab's pickers and Admin >
Models offer a model registered after the page loaded once their tab is selected, and the run monitor takes a
run that was not among the picker's choices when the session began (Gradio refused it: "Value: ... is not in
the list of choices: []", and logged a traceback every refresh)."""
from __future__ import annotations

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402


def test_pickers_follow_the_registry_and_the_monitor_takes_any_run(running_app):
    from labeler.services.serving import models
    from storage import open_db

    admin = Client(running_app.url, auth=running_app.admin, verbose=False)
    admin.predict(api_name="/train_choices")  # the page load
    db = open_db(running_app.db_path)
    try:
        models.register_model(db, "registered-after-load", running_app.model_dir, "base")
        run_id = db.execute("INSERT INTO runs (project_id, stage, status, step, total_steps) VALUES (1, 'grpo',"
                            " 'succeeded', 4, 4)").lastrowid
        db.execute("INSERT INTO metrics (run_id, step, name, value) VALUES (?, 1, 'reward', 0.5)", [run_id])
        db.conn.commit()
    finally:
        db.conn.close()
    model, _reward, _inspect, runs = admin.predict(api_name="/train_refresh_choices")
    assert "registered-after-load" in [choice[0] for choice in model["choices"]]
    assert run_id in [choice[1] for choice in runs["choices"]]
    table, base = admin.predict(api_name="/admin_models_view")
    assert "registered-after-load" in [row[0] for row in table["data"]]
    shown = admin.predict(run_id, api_name="/train_select")
    assert shown[1].startswith(f"### Run #{run_id} · grpo") and 'data-series="reward"' in shown[4]
