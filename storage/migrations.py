"""Forward migrations, in order. Never edit a released one: append a new (name, statements) entry.

Timestamps are ISO-8601 UTC text. JSON columns end in `_json`.
"""

INITIAL_SCHEMA = [
    # A project is a dataset of prompts with its own rating scale, overlap and guidelines (Argilla's "dataset").
    """CREATE TABLE projects (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        likert_min INTEGER NOT NULL DEFAULT 1,
        likert_max INTEGER NOT NULL DEFAULT 7,
        overlap INTEGER NOT NULL DEFAULT 1 CHECK (overlap >= 1),
        guidelines TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        CHECK (likert_max > likert_min)
    )""",
    """CREATE TABLE users (
        id INTEGER PRIMARY KEY,
        username TEXT NOT NULL UNIQUE,
        password_hash TEXT NOT NULL,
        salt TEXT NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('admin', 'annotator')),
        active INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    # messages_json: the conversation before the answer, for conversational prompts (else NULL).
    """CREATE TABLE prompts (
        id INTEGER PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
        text TEXT NOT NULL,
        messages_json TEXT,
        text_hash TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT '',
        split TEXT NOT NULL DEFAULT 'train',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (project_id, text_hash)
    )""",
    """CREATE TABLE models (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        path TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('base', 'policy', 'reward', 'adapter')),
        base_model TEXT,
        run_id INTEGER,
        config_json TEXT NOT NULL DEFAULT '{}',
        metrics_json TEXT NOT NULL DEFAULT '{}',
        data_snapshot TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    # A run is one training job (SFT, reward model, DPO, PPO) started as its own process.
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
        stage TEXT NOT NULL CHECK (stage IN ('sft', 'rm', 'dpo', 'ppo')),
        name TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL DEFAULT 'queued'
            CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
        config_json TEXT NOT NULL DEFAULT '{}',
        command TEXT NOT NULL DEFAULT '',
        pid INTEGER,
        log_path TEXT NOT NULL DEFAULT '',
        output_dir TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        step INTEGER NOT NULL DEFAULT 0,
        total_steps INTEGER NOT NULL DEFAULT 0,
        stop_requested INTEGER NOT NULL DEFAULT 0,
        created_by INTEGER REFERENCES users(id),
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        started_at TEXT,
        ended_at TEXT,
        heartbeat_at TEXT
    )""",
    """CREATE TABLE metrics (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        name TEXT NOT NULL,
        value REAL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        PRIMARY KEY (run_id, step, name)
    )""",
    # A few generations per PPO step with their rewards, for the Train tab's table.
    """CREATE TABLE run_samples (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        query TEXT NOT NULL,
        response TEXT NOT NULL,
        reward REAL
    )""",
    # settings_json: the generation settings; model: the registry name or path that wrote it.
    """CREATE TABLE responses (
        id INTEGER PRIMARY KEY,
        prompt_id INTEGER NOT NULL REFERENCES prompts(id) ON DELETE CASCADE,
        text TEXT NOT NULL,
        model TEXT NOT NULL DEFAULT '',
        settings_json TEXT NOT NULL DEFAULT '{}',
        run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
        source TEXT NOT NULL DEFAULT 'generated',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    # An item is one unit of annotation work: one response to rate, or 2-4 responses to rank.
    # gold_json: the known answer of a gold item ({"score": s} or {"order": [[id], [id, id]]}).
    # priority: higher first (PPO rollouts waiting on humans go ahead of everything else).
    """CREATE TABLE items (
        id INTEGER PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('rating', 'ranking')),
        prompt_id INTEGER NOT NULL REFERENCES prompts(id) ON DELETE CASCADE,
        response_ids_json TEXT NOT NULL,
        gold_json TEXT,
        priority INTEGER NOT NULL DEFAULT 0,
        run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    "CREATE UNIQUE INDEX items_unique ON items (project_id, kind, response_ids_json)",
    # Who holds which item. status: pending (shown, not yet labelled), done, skipped.
    """CREATE TABLE assignments (
        id INTEGER PRIMARY KEY,
        item_id INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'skipped')),
        assigned_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (item_id, user_id)
    )""",
    # request_id makes a submit idempotent: a double click or a retry stores one label.
    """CREATE TABLE ratings (
        id INTEGER PRIMARY KEY,
        item_id INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
        response_id INTEGER NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
        user_id INTEGER NOT NULL REFERENCES users(id),
        score REAL NOT NULL,
        comment TEXT NOT NULL DEFAULT '',
        seconds REAL,
        request_id TEXT UNIQUE,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (item_id, user_id)
    )""",
    # order_json: best to worst, ties grouped: [[12], [14, 15], [13]].
    """CREATE TABLE rankings (
        id INTEGER PRIMARY KEY,
        item_id INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
        prompt_id INTEGER NOT NULL REFERENCES prompts(id) ON DELETE CASCADE,
        user_id INTEGER REFERENCES users(id),
        order_json TEXT NOT NULL,
        comment TEXT NOT NULL DEFAULT '',
        seconds REAL,
        source TEXT NOT NULL DEFAULT 'annotator',
        request_id TEXT UNIQUE,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    "CREATE UNIQUE INDEX rankings_item_user ON rankings (item_id, user_id) WHERE user_id IS NOT NULL",
    # Arena battles: two models on one prompt; the vote is also stored as a ranking.
    """CREATE TABLE battles (
        id INTEGER PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
        prompt_id INTEGER NOT NULL REFERENCES prompts(id) ON DELETE CASCADE,
        model_a TEXT NOT NULL,
        model_b TEXT NOT NULL,
        response_a INTEGER NOT NULL REFERENCES responses(id),
        response_b INTEGER NOT NULL REFERENCES responses(id),
        winner TEXT CHECK (winner IN ('a', 'b', 'tie', 'both_bad')),
        ranking_id INTEGER REFERENCES rankings(id) ON DELETE SET NULL,
        user_id INTEGER REFERENCES users(id),
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        voted_at TEXT
    )""",
    "CREATE INDEX responses_prompt ON responses (prompt_id)",
    "CREATE INDEX items_queue ON items (project_id, kind, priority DESC, id)",
    "CREATE INDEX assignments_user ON assignments (user_id, status)",
    "CREATE INDEX ratings_response ON ratings (response_id)",
    "CREATE INDEX metrics_run ON metrics (run_id, name, step)",
    "INSERT INTO projects (name) VALUES ('default')",
]

MIGRATIONS: list[tuple[str, list[str]]] = [
    ("initial schema", INITIAL_SCHEMA),
    # Exports and agreement join rankings to items; without this a 20k-pair export scans quadratically.
    ("index rankings by item", ["CREATE INDEX rankings_item ON rankings (item_id)"]),
]


# The labelling queue, kept incrementally so that the next item and the Rate/Rank counters cost the same at
# 100k items as at 100. items.is_open: the item can still take a label from someone (gold, or fewer
# done labels than the project's overlap, and not an arena vote); queue_counts: open items per project and kind;
# user_progress: per user, project and kind, their done labels and the open items they already labelled or
# skipped (so "remaining" = open items - those - items others' fresh reservations fill). Triggers keep all three
# in step with assignments, gold, overlap and arena votes, whatever code path writes them.
_ITEM_IS_OPEN = """CASE
    WHEN EXISTS (SELECT 1 FROM rankings r WHERE r.item_id = items.id AND r.source = 'arena') THEN 0
    WHEN items.gold_json IS NOT NULL THEN 1
    WHEN (SELECT COUNT(*) FROM assignments a WHERE a.item_id = items.id AND a.status = 'done')
         < (SELECT p.overlap FROM projects p WHERE p.id = items.project_id) THEN 1
    ELSE 0 END"""


def _refresh_item(item_id: str) -> str:
    return f"UPDATE items SET is_open = {_ITEM_IS_OPEN} WHERE id = {item_id};"


# The user_progress row of an assignment's user, for its item's project and kind.
_PROGRESS_ROW = (
    "user_id = {a}.user_id AND (project_id, kind) = (SELECT project_id, kind FROM items WHERE id = {a}.item_id)"
)
_ITEM_OPEN_NOW = "COALESCE((SELECT is_open FROM items WHERE id = {a}.item_id), 0)"

QUEUE_COUNTERS = [
    "ALTER TABLE items ADD COLUMN is_open INTEGER NOT NULL DEFAULT 1",
    f"UPDATE items SET is_open = {_ITEM_IS_OPEN}",
    """CREATE TABLE queue_counts (
        project_id INTEGER NOT NULL,
        kind TEXT NOT NULL,
        open_items INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (project_id, kind)
    )""",
    """CREATE TABLE user_progress (
        user_id INTEGER NOT NULL,
        project_id INTEGER NOT NULL,
        kind TEXT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        held_open INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (user_id, project_id, kind)
    )""",
    "INSERT INTO queue_counts (project_id, kind, open_items) SELECT project_id, kind, SUM(is_open) FROM items"
    " GROUP BY project_id, kind",
    "INSERT INTO user_progress (user_id, project_id, kind, done, held_open)"
    " SELECT a.user_id, i.project_id, i.kind, SUM(a.status = 'done'), SUM(a.status != 'pending' AND i.is_open)"
    " FROM assignments a JOIN items i ON i.id = a.item_id GROUP BY a.user_id, i.project_id, i.kind",
    # The next item: walk the open items in queue order; full and arena items are not in this index at all.
    "CREATE INDEX items_open_queue ON items (project_id, kind, priority DESC, id) WHERE is_open = 1",
    # Fresh reservations (for "remaining"): few rows, whatever the number of items.
    "CREATE INDEX assignments_pending ON assignments (assigned_at) WHERE status = 'pending'",
    # Triggers last, so the backfill above does not count twice.
    """CREATE TRIGGER items_counted AFTER INSERT ON items BEGIN
        INSERT OR IGNORE INTO queue_counts (project_id, kind) VALUES (NEW.project_id, NEW.kind);
        UPDATE queue_counts SET open_items = open_items + NEW.is_open
            WHERE project_id = NEW.project_id AND kind = NEW.kind;
    END""",
    # BEFORE: cascaded assignment deletes run after the item row is gone and can no longer find its project.
    """CREATE TRIGGER items_uncounted BEFORE DELETE ON items BEGIN
        UPDATE queue_counts SET open_items = open_items - OLD.is_open
            WHERE project_id = OLD.project_id AND kind = OLD.kind;
        UPDATE user_progress SET
            done = done - (SELECT COUNT(*) FROM assignments a
                           WHERE a.item_id = OLD.id AND a.user_id = user_progress.user_id AND a.status = 'done'),
            held_open = held_open - OLD.is_open * (SELECT COUNT(*) FROM assignments a
                           WHERE a.item_id = OLD.id AND a.user_id = user_progress.user_id AND a.status != 'pending')
            WHERE project_id = OLD.project_id AND kind = OLD.kind
              AND user_id IN (SELECT user_id FROM assignments WHERE item_id = OLD.id);
    END""",
    """CREATE TRIGGER items_open_changed AFTER UPDATE OF is_open ON items WHEN OLD.is_open != NEW.is_open BEGIN
        UPDATE queue_counts SET open_items = open_items + NEW.is_open - OLD.is_open
            WHERE project_id = NEW.project_id AND kind = NEW.kind;
        UPDATE user_progress SET held_open = held_open + NEW.is_open - OLD.is_open
            WHERE project_id = NEW.project_id AND kind = NEW.kind
              AND user_id IN (SELECT user_id FROM assignments WHERE item_id = NEW.id AND status != 'pending');
    END""",
    f"""CREATE TRIGGER items_gold_changed AFTER UPDATE OF gold_json ON items BEGIN
        {_refresh_item("NEW.id")}
    END""",
    f"""CREATE TRIGGER projects_overlap_changed AFTER UPDATE OF overlap ON projects BEGIN
        UPDATE items SET is_open = {_ITEM_IS_OPEN} WHERE project_id = NEW.id;
    END""",
    f"""CREATE TRIGGER rankings_arena_added AFTER INSERT ON rankings WHEN NEW.source = 'arena' BEGIN
        {_refresh_item("NEW.item_id")}
    END""",
    f"""CREATE TRIGGER rankings_arena_removed AFTER DELETE ON rankings WHEN OLD.source = 'arena' BEGIN
        {_refresh_item("OLD.item_id")}
    END""",
    # Each assignment trigger first counts the user's own change against the item's open state before it,
    # then refreshes the item: if that closes (or reopens) it, items_open_changed moves every holder,
    # this user included, so a label that fills the item nets to zero for them.
    f"""CREATE TRIGGER assignments_added AFTER INSERT ON assignments BEGIN
        INSERT OR IGNORE INTO user_progress (user_id, project_id, kind)
            SELECT NEW.user_id, project_id, kind FROM items WHERE id = NEW.item_id;
        UPDATE user_progress SET done = done + (NEW.status = 'done'),
                                 held_open = held_open + (NEW.status != 'pending') * {_ITEM_OPEN_NOW.format(a="NEW")}
            WHERE {_PROGRESS_ROW.format(a="NEW")};
        {_refresh_item("NEW.item_id")}
    END""",
    f"""CREATE TRIGGER assignments_status_changed AFTER UPDATE OF status ON assignments
        WHEN OLD.status != NEW.status BEGIN
        UPDATE user_progress SET
            done = done + (NEW.status = 'done') - (OLD.status = 'done'),
            held_open = held_open + ((NEW.status != 'pending') - (OLD.status != 'pending')) * {_ITEM_OPEN_NOW.format(a="NEW")}
            WHERE {_PROGRESS_ROW.format(a="NEW")};
        {_refresh_item("NEW.item_id")}
    END""",
    f"""CREATE TRIGGER assignments_removed AFTER DELETE ON assignments BEGIN
        UPDATE user_progress SET done = done - (OLD.status = 'done'),
                                 held_open = held_open - (OLD.status != 'pending') * {_ITEM_OPEN_NOW.format(a="OLD")}
            WHERE {_PROGRESS_ROW.format(a="OLD")};
        {_refresh_item("OLD.item_id")}
    END""",
]

MIGRATIONS.append(("queue counters and open-item index", QUEUE_COUNTERS))

# A login session remembers the epoch it was issued under; a password change or a deactivation bumps it, which
# ends every session of that user, in this server and in any other (the CLI's `users passwd` too).
MIGRATIONS.append(
    ("users session epoch", ["ALTER TABLE users ADD COLUMN session_epoch INTEGER NOT NULL DEFAULT 0"])
)

# `rlhf-studio eval` and the automatic evaluation of finished policy runs. run_id: the run that trained
# `model` (NULL for a base or imported model); kl_base: the model KL is measured against (NULL: none).
# settings_json holds everything that makes two evaluations comparable (prompts and their hash, reward,
# samples, max_new_tokens, threshold, seed), so a run's "before" is the base's evaluation with equal
# settings. samples_json: every (prompt, answer, reward, kl, length) row.
MIGRATIONS.append(("evaluations", [
    """CREATE TABLE evaluations (
        id INTEGER PRIMARY KEY,
        project_id INTEGER REFERENCES projects(id) ON DELETE CASCADE,
        model TEXT NOT NULL,
        kl_base TEXT,
        run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
        settings_json TEXT NOT NULL DEFAULT '{}',
        metrics_json TEXT NOT NULL DEFAULT '{}',
        samples_json TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    "CREATE INDEX evaluations_model ON evaluations (model, id)",
    "CREATE INDEX evaluations_run ON evaluations (run_id)",
]))

# The one-time admin password printed by `serve` must be replaced at the first login; the
# flag is set by accounts.ensure_admin and cleared by a password change.
MIGRATIONS.append(
    ("users must change password", ["ALTER TABLE users ADD COLUMN must_change_password INTEGER NOT NULL DEFAULT 0"])
)

# The record browser. label_audit keeps every admin correction or deletion of a label (the
# label row itself is changed or gone, so this is the only trace of what it was). The indexes serve the
# browser's filters: prompts paged by id within a project (and by split/source), labels by annotator, rankings
# and items by prompt.
MIGRATIONS.append(("record browser and label audit", [
    """CREATE TABLE label_audit (
        id INTEGER PRIMARY KEY,
        label_kind TEXT NOT NULL CHECK (label_kind IN ('rating', 'ranking')),
        label_id INTEGER NOT NULL,
        item_id INTEGER,
        action TEXT NOT NULL CHECK (action IN ('correct', 'delete')),
        before_json TEXT NOT NULL,
        after_json TEXT,
        reason TEXT NOT NULL DEFAULT '',
        user_id INTEGER REFERENCES users(id),
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    "CREATE INDEX label_audit_label ON label_audit (label_kind, label_id)",
    "CREATE INDEX prompts_project_id ON prompts (project_id, id)",
    "CREATE INDEX prompts_project_split ON prompts (project_id, split, id)",
    "CREATE INDEX prompts_project_source ON prompts (project_id, source, id)",
    "CREATE INDEX ratings_user ON ratings (user_id)",
    "CREATE INDEX rankings_user ON rankings (user_id)",
    "CREATE INDEX rankings_prompt ON rankings (prompt_id)",
    "CREATE INDEX items_prompt ON items (prompt_id)",
]))

# Chat and arena rows carry text from the browser (a chat's prompt, answer and model name),
# so a client could forge "model answers" into training exports. server_generated = 1 marks a response whose
# text this server generated (arena answers always; a chat answer when it matches one the server streamed);
# exports skip chat and arena responses without the mark. Arena answers stored so far were generated by the
# server (arena.start_battle); older chat answers cannot be verified and stay unmarked.
MIGRATIONS.append(("responses server generated", [
    "ALTER TABLE responses ADD COLUMN server_generated INTEGER NOT NULL DEFAULT 0",
    "UPDATE responses SET server_generated = 1 WHERE source = 'arena'",
]))

# Guidelines per label kind; `guidelines` stays the rating text. A project's own text so far was
# shown beside rankings too, so it is copied over; an empty one keeps each kind's default.
MIGRATIONS.append(("projects ranking guidelines", [
    "ALTER TABLE projects ADD COLUMN ranking_guidelines TEXT NOT NULL DEFAULT ''",
    "UPDATE projects SET ranking_guidelines = guidelines",
]))

# How a project's prompts reach the model. 'chat': as a user turn through the tokenizer's chat
# template (the assistant answers); 'continue': as plain text the model continues (the shipped movie-review
# openings). Projects so far were all answered through the chat template.
MIGRATIONS.append(("projects prompt format", [
    "ALTER TABLE projects ADD COLUMN prompt_format TEXT NOT NULL DEFAULT 'chat' CHECK (prompt_format IN ('chat', 'continue'))",
]))

# Which open item the queue serves first. 'arrival': the oldest (within a priority). 'uncertainty': the one whose
# answers' order the project's preference ensemble is least sure of (labeler/services/labels/active_learning.py writes
# selection_score, higher first, and selection_reason, shown to admins), with a fixed share of random items so
# agreement and accuracy figures stay unbiased. Items not yet scored come after the scored ones.
MIGRATIONS.append(("active selection", [
    "ALTER TABLE projects ADD COLUMN selection TEXT NOT NULL DEFAULT 'arrival' CHECK (selection IN ('arrival', 'uncertainty'))",
    "ALTER TABLE items ADD COLUMN selection_score REAL",
    "ALTER TABLE items ADD COLUMN selection_reason TEXT",
    "CREATE INDEX items_open_selection ON items (project_id, kind, priority DESC, selection_score DESC, id) WHERE is_open = 1",
]))

# The TRL 1.x stages (GRPO, RLOO, KTO; labeler/services/training/runners/online.py). SQLite cannot change a CHECK
# constraint in place and rebuilding `runs` would cascade-delete its metrics (foreign keys are on, and cannot be
# turned off inside the migration's transaction), so the constraint's text is edited in the schema itself: a
# change of a CHECK constraint leaves the stored rows' format as it is (SQLite's documented use of
# writable_schema); RESET reloads the schema in every connection.
MIGRATIONS.append(("runs: grpo, rloo and kto stages", [
    "PRAGMA writable_schema = ON",
    "UPDATE sqlite_master SET sql = replace(sql, 'CHECK (stage IN (''sft'', ''rm'', ''dpo'', ''ppo''))', "
    "'CHECK (stage IN (''sft'', ''rm'', ''dpo'', ''ppo'', ''grpo'', ''rloo'', ''kto''))') "
    "WHERE type = 'table' AND name = 'runs'",
    "PRAGMA writable_schema = RESET",
]))

# A team's own task: how long a project's answers are, what "better" means for it, and the share of its
# prompts set aside for evaluation.
# - answer_tokens: the new tokens of an answer in generation, every policy trainer, evaluation, chat and the arena
#   (a run may override it). A continuation of a movie-review opening needs 16; an answer to a question ~128.
# - measure: how a finished run is judged on the held-out prompts: 'vader', 'vader-with-prompt', 'rm:NAME',
#   'module:function' or 'people'; '' follows the newest reward model trained on the project (labeler/services/
#   measures.py). Projects holding the shipped movie-review prompts were judged by VADER so far and keep it.
# - heldout_share: the share of imported prompts held out of training (split 'test'), chosen by a hash of each
#   prompt (labeler/services/data/prompts.py).
MIGRATIONS.append(("projects answer length, measure and held-out share", [
    "ALTER TABLE projects ADD COLUMN answer_tokens INTEGER NOT NULL DEFAULT 128 CHECK (answer_tokens >= 1)",
    "UPDATE projects SET answer_tokens = 16 WHERE prompt_format = 'continue'",
    "ALTER TABLE projects ADD COLUMN measure TEXT NOT NULL DEFAULT ''",
    "UPDATE projects SET measure = 'vader' WHERE id IN (SELECT project_id FROM prompts WHERE source = 'shipped:movie_prompts')",
    "ALTER TABLE projects ADD COLUMN heldout_share REAL NOT NULL DEFAULT 0.1 CHECK (heldout_share >= 0 AND heldout_share < 1)",
]))

# Login sessions of the web app (labeler/services/data/web_sessions.py), so that a server restart keeps people logged
# in. Only a SHA-256 of each cookie token is stored: a copy of the database (a backup) holds no usable session.
# A session is valid while younger than `serve --session-days` and issued under its user's current session_epoch
# (a password change or a deactivation bumps it); a logout deletes the user's rows.
MIGRATIONS.append(("web sessions", [
    """CREATE TABLE web_sessions (
        token_hash TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        issued_at REAL NOT NULL,
        session_epoch INTEGER NOT NULL
    )""",
    "CREATE INDEX web_sessions_user ON web_sessions (user_id)",
]))

# Why a finished run has no held-out evaluation (out of memory, a measure that does not load, anything): one row a
# run, written by labeler/services/evals/evaluation.py when the automatic evaluation fails and removed when one
# succeeds, so the run's page and `runs show` say why and what to do.
# A people-rewarded PPO run's step journal (labeler/services/execution/step_journal.py): each completed step's batch
# (prompt, answer, its token ids, the reward people gave) and the scored rollouts left waiting after it, with the
# stream's position. Written every step (a few kB), so the weights need not be: a resumed run trains the steps after its
# newest weights checkpoint again on the same labelled answers instead of losing them.
MIGRATIONS.append(("evaluation errors and ppo step journal", [
    """CREATE TABLE evaluation_errors (
        run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        model TEXT NOT NULL,
        reason TEXT NOT NULL,
        advice TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    """CREATE TABLE ppo_steps (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL CHECK (step >= 1),
        position INTEGER NOT NULL,
        batch_json TEXT NOT NULL,
        waiting_json TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        PRIMARY KEY (run_id, step)
    )""",
]))

# The online DPO stage (labeler/services/training/runners/online_dpo.py): the CHECK constraint's text edited in place,
# as for the TRL 1.x stages above (a rebuild of `runs` would cascade-delete its metrics).
MIGRATIONS.append(("runs: online-dpo stage", [
    "PRAGMA writable_schema = ON",
    "UPDATE sqlite_master SET sql = replace(sql, '''grpo'', ''rloo'', ''kto''))', "
    "'''grpo'', ''rloo'', ''kto'', ''online-dpo''))') "
    "WHERE type = 'table' AND name = 'runs'",
    "PRAGMA writable_schema = RESET",
]))

# Retired prompts (labeler/services/data/prompts.py retire_prompts): an admin takes a prompt out of use without losing
# what was done with it. Its split becomes 'retired' (out of the labelling queues, training and evaluation, which
# read 'train' or 'test' only) and `retired_from` keeps the split it had, so bringing it back restores it. Its
# answers and labels stay as they are.
MIGRATIONS.append(("prompts retired", [
    "ALTER TABLE prompts ADD COLUMN retired_from TEXT",
]))

# The project a person works in (labeler/services/data/projects.py choose_project): one row per account that picked
# one in the browser; none means the project the server was started with.
MIGRATIONS.append(("project choices", [
    """CREATE TABLE project_choices (
        user_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
        project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE
    )""",
]))

# Feedback beyond one number: a project's own questions beside its main rating/ranking.
# - questions: a criterion (a rating scale per aspect, e.g. "safe" 1-5) or a flag (a label a person may tick,
#   e.g. "spam"). The project's Likert scale stays its first criterion, "overall", held in `ratings`/`rankings`
#   as before, so a project of the previous version is one criterion, unchanged. A retired question keeps its
#   answers and is no longer asked.
# - answers: one person's answer to one question for one answer shown in an item: a criterion's score, a ticked
#   flag, or a text (kind 'correction': the shown answer as it should have been; kind 'written': an answer of
#   the person's own), which have no question row.
MIGRATIONS.append(("project questions and their answers", [
    """CREATE TABLE questions (
        id INTEGER PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('criterion', 'flag')),
        name TEXT NOT NULL,
        scale_min INTEGER,
        scale_max INTEGER,
        guideline TEXT NOT NULL DEFAULT '',
        retired INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (project_id, name),
        CHECK (kind = 'flag' OR scale_max > scale_min)
    )""",
    """CREATE TABLE answers (
        id INTEGER PRIMARY KEY,
        item_id INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
        response_id INTEGER NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
        user_id INTEGER NOT NULL REFERENCES users(id),
        kind TEXT NOT NULL CHECK (kind IN ('score', 'flag', 'correction', 'written')),
        question_id INTEGER REFERENCES questions(id) ON DELETE CASCADE,
        score REAL,
        text TEXT,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        CHECK ((kind IN ('score', 'flag')) = (question_id IS NOT NULL))
    )""",
    # One answer per person, shown answer and question (or text kind): a repeated submit replaces it.
    "CREATE UNIQUE INDEX answers_one ON answers (item_id, response_id, user_id, kind, COALESCE(question_id, 0))",
    "CREATE INDEX answers_question ON answers (question_id)",
]))

# Where each labelled item came from (items.source: a preference row's `source` in exports) and an online run's
# judgements (run_judgements): storage/preference_sources.py says what each holds.
from storage.preference_sources import PREFERENCE_SOURCES  # noqa: E402  (its own file: see its docstring)

MIGRATIONS.append(("preference sources and online judgements", PREFERENCE_SOURCES))

# A run's stage is checked in code against the stage registry (labeler/services/training_stages: runs.insert_run), no
# longer by a CHECK constraint: the constraint repeated the registry's names here, and every new stage needed a
# migration (the two above). Removed by editing its text in the schema, as it was widened (removing a CHECK
# constraint leaves the stored rows' format as it is; a rebuild of `runs` would cascade-delete its metrics).
MIGRATIONS.append(("runs: stage checked against the stage registry", [
    "PRAGMA writable_schema = ON",
    "UPDATE sqlite_master SET sql = replace(sql, "
    "'stage TEXT NOT NULL CHECK (stage IN (''sft'', ''rm'', ''dpo'', ''ppo'', ''grpo'', ''rloo'', ''kto'', "
    "''online-dpo''))', 'stage TEXT NOT NULL') "
    "WHERE type = 'table' AND name = 'runs'",
    "PRAGMA writable_schema = RESET",
]))

# Where a project's answer length came from, in words (labeler/services/serving/answer_length.py): "fitted from 16 of
# the base model's answers: 90% end within 208 tokens", "set by hand"; '' = the prompt format's default, never fitted
# nor set, which the first prompts imported into a chat project replace with a fitted length.
MIGRATIONS.append(("projects answer length origin", [
    "ALTER TABLE projects ADD COLUMN answer_tokens_origin TEXT NOT NULL DEFAULT ''",
]))
