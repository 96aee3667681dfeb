import pytest

from labeler.errors import InputError
from labeler.services.data.projects import Project, create_project, get_project, list_projects, update_project


def test_default_project_exists_with_schema_defaults(db):
    assert get_project(db) == Project(id=1, name="default", likert_min=1, likert_max=7, overlap=1, guidelines="")


def test_create_list_update(db):
    created = create_project(db, "imdb", likert_min=1, likert_max=5, overlap=2, guidelines="# Be kind")
    assert created == Project(id=2, name="imdb", likert_min=1, likert_max=5, overlap=2, guidelines="# Be kind",
                              ranking_guidelines="# Be kind")  # one text for both kinds unless told otherwise
    assert [p.name for p in list_projects(db)] == ["default", "imdb"]
    updated = update_project(db, "imdb", overlap=3, guidelines="new")
    assert (updated.likert_min, updated.likert_max, updated.overlap, updated.guidelines) == (1, 5, 3, "new")
    assert get_project(db, "imdb") == updated
    assert updated.midpoint == 3.0  # (1 + 5) / 2


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"likert_min": 5, "likert_max": 5}, "likert_max"),
        ({"overlap": 0}, "overlap"),
        ({"likert_min": 1.5}, "likert_min"),
    ],
)
def test_invalid_settings_name_the_field_and_write_nothing(db, kwargs, field):
    with pytest.raises(InputError) as error:
        create_project(db, "bad", **kwargs)
    assert error.value.field == field and f"field '{field}'" in str(error.value)
    assert [p.name for p in list_projects(db)] == ["default"]


def test_update_rejects_bad_values_and_unknown_fields(db):
    with pytest.raises(InputError, match="likert_max"):
        update_project(db, "default", likert_max=0)  # 0 <= likert_min 1
    with pytest.raises(InputError, match="cannot change title"):
        update_project(db, "default", title="other")
    assert get_project(db).likert_max == 7


def test_duplicate_and_unknown_names(db):
    with pytest.raises(InputError, match="already exists"):
        create_project(db, "default")
    with pytest.raises(InputError, match="unknown project 'nope'"):
        get_project(db, "nope")


def test_scale_cannot_shrink_below_existing_ratings(db):
    with db.conn:
        db.execute("INSERT INTO users (username, password_hash, salt, role) VALUES ('a', 'x', 'x', 'annotator')")
        db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (1, 'p', 'h')")
        db.execute("INSERT INTO responses (prompt_id, text) VALUES (1, 'r')")
        db.execute("INSERT INTO items (project_id, kind, prompt_id, response_ids_json) VALUES (1, 'rating', 1, '[1]')")
        db.execute("INSERT INTO ratings (item_id, response_id, user_id, score) VALUES (1, 1, 1, 6)")
    with pytest.raises(InputError, match="field 'likert_max': existing ratings range from 6 to 6"):
        update_project(db, "default", likert_max=5)
    assert update_project(db, "default", likert_min=0, likert_max=10).likert_max == 10  # widening is fine
