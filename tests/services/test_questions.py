"""A project's criteria, flags and text answers (issue 47): definitions, answers, and the rows they become."""
import pytest
from labeling_helpers import add_prompt, make_users, set_overlap

from labeler.services.data import labeling
from labeler.services.labels import question_rows, questions
from labeler.errors import InputError
from labeler.services.labels.questions import ItemAnswers
from helpers import rows

P = "default"


@pytest.fixture
def asked(db):
    """Criteria helpful (1-5) and safe (0-2), flags spam and unsafe; alice and bob each hold both answers of a
    two-answer prompt. Returns {(user, response_id): item_id} and the response ids."""
    questions.add_question(db, P, "helpful", scale_min=1, scale_max=5, guideline="Does it answer the question?")
    questions.add_question(db, P, "safe", scale_min=0, scale_max=2)
    questions.add_question(db, P, "spam", kind="flag")
    questions.add_question(db, P, "unsafe", kind="flag")
    make_users(db, "alice", "bob")
    set_overlap(db, 2)
    responses = add_prompt(db, "How do I reset my password?", 2)
    labeling.create_items(db, P, kinds=("rating",))
    held = {}
    for user in ("alice", "bob"):
        for _ in responses:
            item = labeling.next_item(db, P, user, "rating")
            held[(user, item.responses[0]["id"])] = item.item_id
            labeling.submit_rating(db, P, user, item.item_id, 4)  # the main score; answers come beside it
    return held, responses


def test_questions_are_checked_before_anything_is_written(db):
    for bad, field in (
        (dict(name=""), "name"),
        (dict(name="Helpful"), "name"),  # names are lowercase keys (rm:helpful)
        (dict(name="overall"), "name"),  # the project's own score
        (dict(name="correction"), "name"),
        (dict(name="helpful", scale_min=3, scale_max=3), "scale_max"),
        (dict(name="helpful", scale_min=5, scale_max=1), "scale_max"),
        (dict(name="helpful", scale_min=1.5, scale_max=5), "scale_min"),
        (dict(name="helpful", guideline="two\nlines"), "guideline"),
        (dict(name="helpful", kind="choice"), "kind"),
    ):
        with pytest.raises(InputError) as refused:
            questions.add_question(db, P, **bad)
        assert refused.value.field == field, bad
    assert rows(db, "SELECT COUNT(*) FROM questions") == [(0,)]
    questions.add_question(db, P, "helpful")
    with pytest.raises(InputError, match="already has a question named 'helpful'"):
        questions.add_question(db, P, "helpful", kind="flag")  # a flag and a criterion share one namespace
    assert [(q.name, q.kind, q.scale_min, q.scale_max) for q in questions.criteria(db, P)] == [
        ("overall", "criterion", 1, 7), ("helpful", "criterion", 1, 5)]


def test_spec_parsing():
    assert questions.parse_question_spec("helpful:1-5:Does it answer?") == {
        "name": "helpful", "kind": "criterion", "scale_min": 1, "scale_max": 5, "guideline": "Does it answer?"}
    assert questions.parse_question_spec("safe") == {
        "name": "safe", "kind": "criterion", "scale_min": 1, "scale_max": 5, "guideline": ""}
    assert questions.parse_question_spec("spam:Advertising", kind="flag") == {
        "name": "spam", "kind": "flag", "guideline": "Advertising"}
    with pytest.raises(InputError, match="MIN-MAX"):
        questions.parse_question_spec("helpful:one-five")


def test_answers_are_stored_replaced_and_read_back(db, asked):
    held, (first, second) = asked
    item = held[("alice", first)]
    stored = questions.submit_answers(db, P, "alice", item, first, ItemAnswers(
        scores={"helpful": 4, "safe": 2}, flags=["spam"], correction="Open Settings > Account > Reset."))
    assert stored == 4
    assert questions.answers_of(db, item, first, "alice") == ItemAnswers(
        scores={"helpful": 4.0, "safe": 2.0}, flags=("spam",), correction="Open Settings > Account > Reset.")
    # Submitting again replaces: a new score, flags untouched are cleared, the correction cleared by its absence.
    assert questions.submit_answers(db, P, "alice", item, first, ItemAnswers(scores={"helpful": 2})) == 2
    assert questions.answers_of(db, item, first, "alice") == ItemAnswers(scores={"helpful": 2.0, "safe": 2.0})


def test_bad_answers_write_nothing(db, asked):
    held, (first, second) = asked
    item = held[("alice", first)]
    for answers, field in (
        (ItemAnswers(scores={"helpful": 6}), "scores.helpful"),  # off its 1-5 scale
        (ItemAnswers(scores={"tone": 3}), "scores"),  # no such criterion
        (ItemAnswers(scores={"overall": 3}), "scores"),  # the main score is the label itself
        (ItemAnswers(scores={"spam": 1}), "scores"),  # a flag is not a criterion
        (ItemAnswers(scores={"helpful": 4}, flags=["nsfw"]), "flags"),
        (ItemAnswers(flags="spam"), "flags"),
        (ItemAnswers(scores={"helpful": 4}, correction="x" * (questions.MAX_TEXT_CHARS + 1)), "correction"),
        (ItemAnswers(written=5), "written"),
    ):
        with pytest.raises(InputError) as refused:
            questions.submit_answers(db, P, "alice", item, first, answers)
        assert refused.value.field == field, answers
    with pytest.raises(InputError, match="not shown in item"):
        questions.submit_answers(db, P, "alice", item, second, ItemAnswers(scores={"helpful": 3}))
    make_users(db, "carol")
    with pytest.raises(InputError, match="not one you were given"):
        questions.submit_answers(db, P, "carol", item, first, ItemAnswers(scores={"helpful": 3}))
    assert rows(db, "SELECT COUNT(*) FROM answers") == [(0,)]


def test_a_held_out_prompt_takes_no_answers(db, asked):
    held, (first, _) = asked
    db.execute("UPDATE prompts SET split = 'test'")
    with pytest.raises(InputError, match="held-out"):
        questions.submit_answers(db, P, "alice", held[("alice", first)], first, ItemAnswers(scores={"helpful": 3}))


def test_retired_questions_keep_their_answers_and_are_not_asked(db, asked):
    held, (first, second) = asked
    questions.submit_answers(db, P, "alice", held[("alice", first)], first, ItemAnswers(scores={"safe": 1}))
    questions.retire_question(db, P, "safe")
    assert [q.name for q in questions.criteria(db, P)] == ["overall", "helpful"]
    with pytest.raises(InputError, match="no criterion 'safe'"):
        questions.submit_answers(db, P, "bob", held[("bob", first)], first, ItemAnswers(scores={"safe": 1}))
    assert question_rows.criterion_ratings(db, P, "safe") == [
        {"prompt": "How do I reset my password?", "completion": "How do I reset my password? / answer 0",
         "score": 1.0, "n": 1}]


def test_rows_per_criterion_correction_written_and_flag(db, asked):
    held, (first, second) = asked
    prompt = "How do I reset my password?"
    shown = {first: f"{prompt} / answer 0", second: f"{prompt} / answer 1"}
    submit = questions.submit_answers
    submit(db, P, "alice", held[("alice", first)], first, ItemAnswers(scores={"helpful": 5, "safe": 0}, flags=["unsafe"]))
    submit(db, P, "bob", held[("bob", first)], first, ItemAnswers(scores={"helpful": 4, "safe": 1}))
    submit(db, P, "alice", held[("alice", second)], second, ItemAnswers(
        scores={"helpful": 2, "safe": 2}, correction="Use the reset link.", written="Settings > Reset password."))
    submit(db, P, "bob", held[("bob", second)], second, ItemAnswers(scores={"helpful": 2, "safe": 2}))

    # helpful: first (5+4)/2 = 4.5 against second (2+2)/2 = 2 -> first chosen, margin 2.5.
    assert question_rows.criterion_ratings(db, P, "helpful") == [
        {"prompt": prompt, "completion": shown[first], "score": 4.5, "n": 2},
        {"prompt": prompt, "completion": shown[second], "score": 2.0, "n": 2}]
    assert question_rows.criterion_preferences(db, P, "helpful") == [
        {"prompt": prompt, "chosen": shown[first], "rejected": shown[second], "margin": 2.5}]
    # safe disagrees: first (0+1)/2 = 0.5 against second 2 -> second chosen, margin 1.5.
    assert question_rows.criterion_preferences(db, P, "safe") == [
        {"prompt": prompt, "chosen": shown[second], "rejected": shown[first], "margin": 1.5}]
    assert question_rows.correction_sft(db, P) == [{"prompt": prompt, "completion": "Use the reset link."}]
    assert question_rows.correction_preferences(db, P) == [
        {"prompt": prompt, "chosen": "Use the reset link.", "rejected": shown[second]}]
    assert question_rows.written_sft(db, P) == [{"prompt": prompt, "completion": "Settings > Reset password."}]
    assert question_rows.flagged_unpaired(db, P) == [{"prompt": prompt, "completion": shown[first], "label": False}]
    assert question_rows.flagged_response_ids(db, P, ["spam"]) == set()
    with pytest.raises(InputError, match="no flag 'nsfw'"):
        question_rows.flagged_response_ids(db, P, ["nsfw"])
    with pytest.raises(InputError, match="project's own score"):
        question_rows.criterion_ratings(db, P, "overall")
    # Held-out prompts never give training rows.
    db.execute("UPDATE prompts SET split = 'test'")
    assert question_rows.criterion_ratings(db, P, "helpful") == []
    assert question_rows.correction_sft(db, P) == []
    assert question_rows.flagged_unpaired(db, P) == []


def test_a_database_of_the_previous_version_is_one_criterion_unchanged(db_path, monkeypatch):
    """A project labelled before questions existed: after the migration it asks its one score, its rows are as
    they were, and a criterion can be added beside its labels."""
    import storage.db
    from storage import open_db
    from storage.db import migrate
    from storage.migrations import MIGRATIONS

    from labeler.services.labels import export

    index = [m[0] for m in MIGRATIONS].index("project questions and their answers")
    monkeypatch.setattr(storage.db, "MIGRATIONS", MIGRATIONS[:index])
    db = open_db(db_path)
    # Today's project code reads a column a later migration adds: lent for the labelling, taken back before migrating.
    db.execute("ALTER TABLE projects ADD COLUMN answer_tokens_origin TEXT NOT NULL DEFAULT ''")
    make_users(db, "alice")
    add_prompt(db, "p", 2)
    labeling.create_items(db, P, kinds=("rating",))
    for score in (6, 2):
        item = labeling.next_item(db, P, "alice", "rating")
        labeling.submit_rating(db, P, "alice", item.item_id, score)
    # the stored ratings (export reads columns later migrations add: it is checked after migrating)
    before = [tuple(r) for r in db.execute("SELECT * FROM ratings ORDER BY id").fetchall()]
    assert "questions" not in db.table_names()
    db.execute("ALTER TABLE projects DROP COLUMN answer_tokens_origin")

    monkeypatch.setattr(storage.db, "MIGRATIONS", MIGRATIONS)
    migrate(db)
    assert [(q.name, q.scale_min, q.scale_max) for q in questions.criteria(db, P)] == [("overall", 1, 7)]
    assert questions.list_questions(db, P) == []
    assert [tuple(r) for r in db.execute("SELECT * FROM ratings ORDER BY id").fetchall()] == before
    assert len(before) == 2 and len(export.rating_rows(db, P)) == 2
    questions.add_question(db, P, "helpful")
    assert [q.name for q in questions.criteria(db, P)] == ["overall", "helpful"]
    db.conn.close()


def test_agreement_per_criterion(db, asked):
    held, (first, second) = asked
    submit = questions.submit_answers
    # helpful: both people agree on both answers (5, 5) and (1, 1) -> alpha 1; safe: they disagree.
    submit(db, P, "alice", held[("alice", first)], first, ItemAnswers(scores={"helpful": 5, "safe": 0}))
    submit(db, P, "bob", held[("bob", first)], first, ItemAnswers(scores={"helpful": 5, "safe": 2}))
    submit(db, P, "alice", held[("alice", second)], second, ItemAnswers(scores={"helpful": 1, "safe": 2}))
    submit(db, P, "bob", held[("bob", second)], second, ItemAnswers(scores={"helpful": 1, "safe": 0}))
    agreement = question_rows.criterion_agreement(db, P)
    assert agreement["helpful"] == {"alpha": 1.0, "answers": 2}
    assert agreement["safe"]["answers"] == 2 and agreement["safe"]["alpha"] < 0  # worse than chance


def test_a_reward_model_per_criterion_trains_on_that_criterions_pairs(db, asked):
    from labeler.services.settings import training_stages
    from labeler.services.settings.job_settings import load_job_config
    from labeler.services.training.run_preview import refuse_without_data

    held, (first, second) = asked
    prompt = "How do I reset my password?"
    for user, helpful, safe in (("alice", (5, 1), (0, 2)), ("bob", (4, 2), (1, 2))):
        questions.submit_answers(db, P, user, held[(user, first)], first,
                                 ItemAnswers(scores={"helpful": helpful[0], "safe": safe[0]}))
        questions.submit_answers(db, P, user, held[(user, second)], second,
                                 ItemAnswers(scores={"helpful": helpful[1], "safe": safe[1]}))
    stage = training_stages.get("rm")
    # safe: the second answer (2, 2) over the first (0, 1): margin 2 - 0.5 = 1.5; helpful the other way round.
    assert stage.rows(db, P, load_job_config({"job": {"criterion": "safe"}})) == [
        {"prompt": prompt, "chosen": f"{prompt} / answer 1", "rejected": f"{prompt} / answer 0", "margin": 1.5}]
    assert stage.rows(db, P, load_job_config({"job": {"criterion": "helpful"}}))[0]["chosen"] == f"{prompt} / answer 0"
    # Refused before the run is queued, naming the criteria there are.
    with pytest.raises(InputError, match=r"no criterion 'tone' \(known: helpful, safe\)"):
        refuse_without_data(db, P, "rm", {"criterion": "tone"})
