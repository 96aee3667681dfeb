"""Issue 49 item 8: the first preview, launch check, Records search and login of a served app import nothing heavy
inside the request. `rlhf-studio serve` builds the app (the Train tab resolves every stage's settings, which
imports the trainers' config classes: torch, transformers, peft, accelerate, datasets) and launch's warm-up
(app.start_warm_imports) runs before anyone can press a button; what the first click would still import it pays in
the request, seconds on a loaded machine. Checked in a fresh interpreter: its sys.modules after the build and the
warm-up, against those after the first calls."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# What a first click must not import: the heavy libraries and the trainers (rlhf.sft, rlhf.dpo, ...). A model's
# config module (transformers.models.<type>.configuration_<type>, read by the preview's memory estimate) is
# small and model-specific, so it is allowed.
HEAVY = ("torch", "transformers", "peft", "accelerate", "datasets", "scipy", "rlhf.sft", "rlhf.reward", "rlhf.dpo",
         "rlhf.grpo", "rlhf.rloo", "rlhf.kto", "rlhf.online_dpo", "rlhf.configs", "labeler.services.training.run_estimate",
         "labeler.services.serving.inference")
ALLOWED = ("transformers.models.",)

FIRST_CLICKS = """
import json, sys
sys.path.insert(0, {services!r})
from export_fixtures import build_labelled_db
from storage import open_db
db = open_db({db_path!r})
build_labelled_db(db)
from labeler.ui.app import build_app, start_warm_imports
from labeler.ui.context import ServeSettings
build_app(ServeSettings(db_path={db_path!r}))
start_warm_imports().join(600)
before = set(sys.modules)
from labeler.services.data import accounts
from labeler.services.training import jobs
from labeler.services.labels import records
from labeler.services.training.run_preview import preview_run
preview_run(db, "default", "dpo", {{"steps": 3}})
preview_run(db, "default", "ppo", {{"batch_size": 8, "mini_batch_size": 4, "answers_per_prompt": 4}},
            estimate_time=False)
jobs.create_run(db, "dpo", {{"steps": 3}}, runs_dir={runs!r}, start=False)
records.list_records(db, records.RecordFilters(project="default"))
accounts.create_user(db, "zoe", "zoe-password-1")
accounts.authenticate(db, "zoe", "zoe-password-1")
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_first_clicks_of_a_built_app_import_nothing_heavy(tmp_path):
    code = FIRST_CLICKS.format(services=str(TESTS / "services"), db_path=str(tmp_path / "studio.db"),
                               runs=str(tmp_path / "runs"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                          cwd=str(TESTS.parent))
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    heavy = [name for name in loaded if name.startswith(HEAVY) and not name.startswith(ALLOWED)]
    assert heavy == []
