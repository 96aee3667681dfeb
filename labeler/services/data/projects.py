"""Projects: a set of prompts with its own Likert scale, overlap and guidelines (Argilla's "dataset").

Projects are addressed by name everywhere (CLI --project, UI settings); the id is storage detail.
Guidelines are kept per label kind (`guidelines` for ratings, `ranking_guidelines` for rankings); an empty
text means the kind's default (DEFAULT_GUIDELINES), and `Project.guidelines_for(kind)` is the one place that
resolves it, for the Rate and Rank tabs and the Admin form alike.

`project_counts` and the Likert-scale check read other tables (counts of prompts, answers and labels, the range
of stored ratings) in joins on the project; they stay here because `prompts` and `labeling` import this module.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlite_utils

from labeler.errors import InputError
from storage import write_transaction

# Columns that update_project may change; the name is the key and stays fixed.
EDITABLE_FIELDS = ("likert_min", "likert_max", "overlap", "guidelines", "ranking_guidelines", "prompt_format", "selection",
                   "answer_tokens", "measure", "heldout_share", "answer_tokens_origin")
COLUMNS = ("id", "name", *EDITABLE_FIELDS)
# How a project's prompts reach the model, in generation, PPO rollouts, evaluation and SFT/DPO training alike.
PROMPT_FORMATS = {
    "chat": "the prompt is a user message; the model answers it through its chat template",
    "continue": "the prompt is the start of a text; the model continues it (no chat template)",
}
# A new project's answer length by prompt format: an answer to a question needs room (cut at 16 tokens it stops
# mid-sentence and people rank truncated answers); a continuation of the shipped task's review openings does not.
DEFAULT_ANSWER_TOKENS = {"chat": 128, "continue": 16}
# answer_tokens_origin of a length a person chose (create_project's or update_project's answer_tokens).
SET_BY_HAND = "set by hand"
MAX_ANSWER_TOKENS = 4096
# Share of a project's imported prompts held out of training for evaluation (split 'test').
DEFAULT_HELDOUT_SHARE = 0.1
# Which open item annotators get next (labeler/services/labels/active_learning.py).
SELECTIONS = {
    "arrival": "the oldest item first",
    "uncertainty": "the items the reward model is least sure of first, with a share of random items",
}
# What annotators read beside an item while the project has no text of its own for that kind.
DEFAULT_GUIDELINES = {
    "rating": (
        "Read the prompt, then the answer. Score how good the answer is **as a reply to that prompt**: "
        "helpful, correct, on topic, well written. Use the whole scale; skip what you cannot judge."
    ),
    "ranking": (
        "Read the prompt, then every answer. Order the answers from **best to worst as replies to that prompt**: "
        "helpful, correct, on topic, well written. Give two answers the same rank only when you truly cannot "
        "choose between them; skip what you cannot judge."
    ),
}


@dataclass(frozen=True)
class Project:
    id: int
    name: str
    likert_min: int
    likert_max: int
    overlap: int
    guidelines: str  # for ratings ("" = DEFAULT_GUIDELINES["rating"])
    ranking_guidelines: str = ""  # for rankings ("" = DEFAULT_GUIDELINES["ranking"])
    prompt_format: str = "chat"  # a PROMPT_FORMATS key
    selection: str = "arrival"  # a SELECTIONS key
    answer_tokens: int = 128  # new tokens per answer: generation, training, evaluation, chat, arena
    measure: str = ""  # how runs are judged (labeler/services/evals/measures.py); "" = measures.default decides
    heldout_share: float = DEFAULT_HELDOUT_SHARE  # share of imported prompts held out (split 'test')
    answer_tokens_origin: str = ""  # where answer_tokens came from, in words; "" = the prompt format's default

    @property
    def answer_length_origin(self) -> str:
        """Where the answer length came from, for people: the stored words, else the format's default."""
        return self.answer_tokens_origin or f"the default for {self.prompt_format} projects"

    @property
    def chat_template(self) -> bool | None:
        """rlhf.generation.build_prompt_ids's use_chat_template for this project's prompts: None (the
        tokenizer's template when it has one) for chat projects, False (plain text) for continuation."""
        return None if self.prompt_format == "chat" else False

    def guidelines_for(self, kind: str) -> str:
        """The text annotators see beside an item of this kind: the project's own, else the kind's default."""
        own = self.ranking_guidelines if kind == "ranking" else self.guidelines
        return own if own.strip() else DEFAULT_GUIDELINES["ranking" if kind == "ranking" else "rating"]

    @property
    def midpoint(self) -> float:
        return (self.likert_min + self.likert_max) / 2


def _from_row(row) -> Project:
    return Project(**{column: row[column] for column in COLUMNS})


def _select(db: sqlite_utils.Database, name: str):
    return db.execute(f"SELECT {', '.join(COLUMNS)} FROM projects WHERE name = ?", [name]).fetchone()


def get_project(db: sqlite_utils.Database, name: str = "default") -> Project:
    row = _select(db, name)
    if row is None:
        known = ", ".join(p.name for p in list_projects(db)) or "none"
        raise InputError(f"unknown project '{name}' (known: {known})", field="project")
    return _from_row(row)


def is_untouched_default(db: sqlite_utils.Database, project: Project) -> bool:
    """True for the "default" project exactly as the database was created with it: no prompts, no runs and every
    setting as a new project has it. Only such a project may receive the shipped example task on `serve`'s first
    start; any project a team made or changed is theirs and is never rewritten."""
    if project.name != "default":
        return False
    for table in ("prompts", "runs"):
        if db.execute(f"SELECT COUNT(*) FROM {table} WHERE project_id = ?", [project.id]).fetchone()[0]:
            return False
    as_created = Project(id=project.id, name=project.name, likert_min=1, likert_max=7, overlap=1, guidelines="")
    return project == as_created


def list_projects(db: sqlite_utils.Database) -> list[Project]:
    rows = db.execute(f"SELECT {', '.join(COLUMNS)} FROM projects ORDER BY id")
    return [_from_row(row) for row in rows.fetchall()]


def _validate(
    name: str, likert_min: int, likert_max: int, overlap: int, guidelines: str, ranking_guidelines: str = "",
    prompt_format: str = "chat", selection: str = "arrival", answer_tokens: int = 128, measure: str = "",
    heldout_share: float = DEFAULT_HELDOUT_SHARE, answer_tokens_origin: str = "",
) -> None:
    # Checked here as well as by the table's CHECKs so the user sees which field is wrong, not an IntegrityError.
    if not isinstance(name, str) or not name.strip():
        raise InputError("a project needs a non-empty name", field="name")
    for field, value in (("likert_min", likert_min), ("likert_max", likert_max), ("overlap", overlap),
                         ("answer_tokens", answer_tokens)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"must be an integer, got {value!r}", field=field)
    if likert_max <= likert_min:
        raise InputError(f"likert_max ({likert_max}) must be greater than likert_min ({likert_min})", field="likert_max")
    if overlap < 1:
        raise InputError(f"overlap must be at least 1 (annotators per item), got {overlap}", field="overlap")
    for field, value in (("guidelines", guidelines), ("ranking_guidelines", ranking_guidelines)):
        if not isinstance(value, str):
            raise InputError("guidelines must be text (markdown)", field=field)
    if selection not in SELECTIONS:
        raise InputError(f"unknown selection {selection!r} (known: {', '.join(SELECTIONS)})", field="selection")
    if prompt_format not in PROMPT_FORMATS:
        raise InputError(f"unknown prompt format {prompt_format!r} (known: {', '.join(PROMPT_FORMATS)})", field="prompt_format")
    if not 1 <= answer_tokens <= MAX_ANSWER_TOKENS:
        raise InputError(f"answer length must be 1 to {MAX_ANSWER_TOKENS} tokens, got {answer_tokens}", field="answer_tokens")
    for field, value in (("measure", measure), ("answer_tokens_origin", answer_tokens_origin)):
        if not isinstance(value, str):
            raise InputError(f"must be text, got {value!r}", field=field)
    if isinstance(heldout_share, bool) or not isinstance(heldout_share, (int, float)) or not 0 <= heldout_share < 1:
        raise InputError(f"must be a share in [0, 1), got {heldout_share!r}", field="heldout_share")


def create_project(
    db: sqlite_utils.Database,
    name: str,
    likert_min: int = 1,
    likert_max: int = 7,
    overlap: int = 1,
    guidelines: str = "",
    ranking_guidelines: str | None = None,
    prompt_format: str = "chat",
    answer_tokens: int | None = None,
    heldout_share: float = DEFAULT_HELDOUT_SHARE,
) -> Project:
    """A new project; `ranking_guidelines` None: the same text as `guidelines` for both kinds; `answer_tokens`
    None: the prompt format's DEFAULT_ANSWER_TOKENS (fitted at the first import of a chat project's prompts,
    labeler/services/serving/answer_length.py), else SET_BY_HAND. The measure starts as "" (measures.default:
    people's blind pairs once someone labels, else the newest reward model); set it with measures.set_measure,
    which checks that what it names exists."""
    ranking_guidelines = guidelines if ranking_guidelines is None else ranking_guidelines
    origin = SET_BY_HAND if answer_tokens is not None else ""
    if answer_tokens is None:
        answer_tokens = DEFAULT_ANSWER_TOKENS.get(prompt_format, DEFAULT_ANSWER_TOKENS["chat"])
    _validate(name, likert_min, likert_max, overlap, guidelines, ranking_guidelines, prompt_format,
              answer_tokens=answer_tokens, heldout_share=heldout_share)
    name = name.strip()
    with write_transaction(db):
        if _select(db, name) is not None:
            raise InputError(f"project '{name}' already exists", field="name")
        db.execute(
            "INSERT INTO projects (name, likert_min, likert_max, overlap, guidelines, ranking_guidelines, prompt_format,"
            " answer_tokens, heldout_share, answer_tokens_origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [name, likert_min, likert_max, overlap, guidelines, ranking_guidelines, prompt_format, answer_tokens,
             float(heldout_share), origin],
        )
    return get_project(db, name)


def update_project(db: sqlite_utils.Database, name: str, **fields) -> Project:
    """Change any of EDITABLE_FIELDS; fields left out (or None) keep their value. `measure` is checked for syntax
    only here (measures.set_measure checks that the model or function it names exists); `heldout_share` only
    sets the share of later imports (prompts.change_heldout_share re-splits the prompts there are). A guidelines text
    equal to its kind's default is stored as "" (= follow the default)."""
    unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
    if unknown:
        raise InputError(f"cannot change {', '.join(unknown)} (editable: {', '.join(EDITABLE_FIELDS)})", field=unknown[0])
    fields = {key: value for key, value in fields.items() if value is not None}
    for key, kind in (("guidelines", "rating"), ("ranking_guidelines", "ranking")):
        # The Admin form shows the default text in full; saving it unchanged must not freeze a copy of it.
        if isinstance(fields.get(key), str) and fields[key].strip() == DEFAULT_GUIDELINES[kind].strip():
            fields[key] = ""
    with write_transaction(db):
        current = get_project(db, name)
        if fields.get("answer_tokens", current.answer_tokens) != current.answer_tokens:
            # A length changed without saying where it came from is a person's choice (the Admin form, `projects
            # set`); one saved unchanged keeps its origin.
            fields.setdefault("answer_tokens_origin", SET_BY_HAND)
        merged = {key: fields.get(key, getattr(current, key)) for key in EDITABLE_FIELDS}
        _validate(name, **merged)
        # Narrowing the scale under existing ratings would leave scores the new scale cannot hold.
        low, high = db.execute(
            "SELECT MIN(r.score), MAX(r.score) FROM ratings r JOIN items i ON i.id = r.item_id WHERE i.project_id = ?",
            [current.id],
        ).fetchone()
        if low is not None and (low < merged["likert_min"] or high > merged["likert_max"]):
            field = "likert_min" if low < merged["likert_min"] else "likert_max"
            raise InputError(f"existing ratings range from {low:g} to {high:g}: the scale must still include them", field=field)
        if fields:
            assignments = ", ".join(f"{key} = ?" for key in fields)
            db.execute(f"UPDATE projects SET {assignments} WHERE id = ?", [*fields.values(), current.id])
    return get_project(db, name)


def project_counts(db: sqlite_utils.Database, project: str) -> dict[str, int]:
    """prompts, responses, ratings and rankings of the project: what to do next depends on which are zero."""
    project_id = get_project(db, project).id

    def count(sql: str) -> int:
        return db.execute(sql, [project_id]).fetchone()[0]

    return {
        "prompts": count("SELECT COUNT(*) FROM prompts WHERE project_id = ?"),
        "responses": count(
            "SELECT COUNT(*) FROM responses r JOIN prompts p ON p.id = r.prompt_id WHERE p.project_id = ?"),
        "ratings": count("SELECT COUNT(*) FROM ratings r JOIN items i ON i.id = r.item_id WHERE i.project_id = ?"),
        "rankings": count(
            "SELECT COUNT(*) FROM rankings r JOIN prompts p ON p.id = r.prompt_id WHERE p.project_id = ?"),
    }


# --- the project each person works in --------------------------------------------------------------------------
# A person's choice in the browser, kept in SQLite (table project_choices) so it survives a refresh and a server
# restart, and is theirs alone: another admin switching projects changes nothing for them.


def chosen_project(db: sqlite_utils.Database, username: str, default: str) -> str:
    """The project `username` works in: the one they chose, else `default` (the server's --project)."""
    row = db.execute(
        "SELECT p.name FROM project_choices c JOIN users u ON u.id = c.user_id JOIN projects p ON p.id = c.project_id"
        " WHERE u.username = ?", [username]).fetchone()
    return row[0] if row is not None else default


def choose_project(db: sqlite_utils.Database, username: str, project: str) -> Project:
    """`username` works in `project` from now on (every tab of theirs reads and writes it)."""
    chosen = get_project(db, project)
    with write_transaction(db):
        user = db.execute("SELECT id FROM users WHERE username = ?", [username]).fetchone()
        if user is None:
            raise InputError(f"unknown user '{username}'", field="username")
        db.execute("INSERT INTO project_choices (user_id, project_id) VALUES (?, ?)"
                   " ON CONFLICT (user_id) DO UPDATE SET project_id = excluded.project_id", [user[0], chosen.id])
    return chosen
