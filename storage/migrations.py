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
