"""The migration "preference sources and online judgements" (appended to storage/migrations.py's list), kept in a file
of its own so that another migration appended meanwhile meets one line of migrations.py, not this block.

1. `items.source`: where a labelled item's answers came from, so a preference judged anywhere is one row with its
   origin (labeler/services/labels/export.py writes it as the `source` column of preference rows):
   - 'rank' / 'rate': answers generated for the Rank or Rate queue (responses.source 'generated'), or any item
     whose answers say nothing else;
   - 'arena': an arena vote (its two answers, responses.source 'arena');
   - 'evaluation': the `people` measure's blind pair of a base's and a tuned model's answer (labeler/services/
     people_eval.py; held-out prompts);
   - a run's stage ('online-dpo', 'ppo', 'grpo', 'rloo'): the answers a training run sent to people (items.run_id,
     or its answers' run); 'run' when that run was deleted before this migration;
   - 'import', 'chat', ...: the answers' own source otherwise.
   A column rather than a view: an item keeps its origin when its run is deleted (items.run_id is SET NULL then).
   A trigger fills it for every new item, so the writers (labeling.insert_item and its callers) need no change; a
   writer may set it itself (the trigger only fills NULL).
2. `run_judgements`: each pair an online run (online DPO) had judged, who decided it (people, the model, or nobody:
   identical answers or no ranking in time), people's and the model's verdicts where each gave one (0: the first
   answer better, 1: the second, -1: a tie), and the Rank item people saw. The run's page reads its summary from it
   (labeler/services/execution/run_judgements.py); rows stay when the run fails, so no judgement made is lost.
"""

# The origin of item `X` (an alias: NEW in a trigger, items in the backfill), from its first answer and its run.
_ITEM_SOURCE = """COALESCE(
    (SELECT CASE
        WHEN r.source = 'generated' THEN NULL
        WHEN r.source = 'ppo' THEN COALESCE((SELECT stage FROM runs WHERE id = COALESCE({x}.run_id, r.run_id)), 'run')
        ELSE r.source END
     FROM responses r WHERE r.id = json_extract({x}.response_ids_json, '$[0]')),
    (SELECT stage FROM runs WHERE id = {x}.run_id),
    CASE {x}.kind WHEN 'ranking' THEN 'rank' ELSE 'rate' END)"""

PREFERENCE_SOURCES = [
    "ALTER TABLE items ADD COLUMN source TEXT",
    f"UPDATE items SET source = {_ITEM_SOURCE.format(x='items')}",
    f"""CREATE TRIGGER items_source AFTER INSERT ON items WHEN NEW.source IS NULL BEGIN
        UPDATE items SET source = {_ITEM_SOURCE.format(x='NEW')} WHERE id = NEW.id;
    END""",
    """CREATE TABLE run_judgements (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL CHECK (step >= 1),
        prompt TEXT NOT NULL,
        first TEXT NOT NULL,
        second TEXT NOT NULL,
        judged_by TEXT NOT NULL CHECK (judged_by IN ('people', 'model', 'none')),
        verdict INTEGER NOT NULL CHECK (verdict IN (-1, 0, 1)),
        people INTEGER CHECK (people IN (-1, 0, 1)),
        model INTEGER CHECK (model IN (-1, 0, 1)),
        item_id INTEGER REFERENCES items(id) ON DELETE SET NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    "CREATE INDEX run_judgements_run ON run_judgements (run_id, step)",
]
