"""What the Rate and Rank tabs share (labeler/ui/tabs/labelling.py), called directly: the item key, the banner,
the live count and its quiet refusals."""
from __future__ import annotations

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app_db, as_user, ctx  # noqa: F401 - fixtures

from labeler.errors import InputError
from labeler.ui.tabs import labelling, rate


def test_parse_key_reads_what_item_key_wrote_and_names_the_field_otherwise():
    class Item:
        item_id, request_id = 12, "abc-def"

    assert labelling.parse_key(labelling.item_key(Item())) == (12, "abc-def")
    for bad in ["", None, "12", "x:abc", ":abc"]:
        with pytest.raises(InputError, match="field 'key'.*expected the key of the item shown"):
            labelling.parse_key(bad)


def test_banner_names_the_run_the_model_and_the_labels_it_waits_for():
    assert labelling.banner_text(None) == ""
    assert labelling.banner_text(7, 3, "ppo-7") == (
        "⏳ Your labels are training the model **ppo-7** right now (training run **#7**, waiting for **3** more "
        "labels): its answers come first.")
    assert labelling.banner_text(7) == "⏳ Your labels are training the model right now (training run **#7**): its answers come first."


def test_the_live_count_follows_the_queue_and_stays_quiet_when_refused(ctx):
    # 2 prompts x 3 answers: 6 rating items for the annotator; a label moves one from remaining to done. The banner
    # comes with the count ("": no training run waits for this item).
    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    key = shown[6]
    assert labelling.count(ctx, "rating", key, request=as_user(ANNOTATOR)) == ("**0** done · **6** remaining", "")
    rate.submit(ctx, 5, "", key, request=as_user(ANNOTATOR))
    assert labelling.count(ctx, "rating", key, request=as_user(ANNOTATOR)) == ("**1** done · **5** remaining", "")
    assert labelling.count(ctx, "ranking", key, request=as_user(ADMIN)) == ("**0** done · **2** remaining", "")
    # No item shown ("All done"), a stranger, nobody logged in: the counter stays as it is, no toast.
    unchanged = (gr.skip(), gr.skip())
    assert labelling.count(ctx, "rating", "", request=as_user(ANNOTATOR)) == unchanged
    assert labelling.count(ctx, "rating", key, request=as_user("stranger")) == unchanged
    assert labelling.count(ctx, "rating", key, request=as_user(None)) == unchanged
