"""Labelling: items to label, who holds which, submit, skip, undo, gold answers.

An item is one unit of work (a response to rate, or 2-8 responses of a prompt to rank). An assignment
says that a user holds an item: pending (shown), done (labelled) or skipped. The queue rules:

1. A user's own pending assignment comes back first, the newest one first (so a refresh shows the
   same item, and an undone item comes back at once).
2. Otherwise the user gets the highest-priority, oldest item they never held (in any status) that fewer
   than `overlap` users hold: done, or pending for less than PENDING_TTL. A pending assignment older than
   that is stale (the annotator walked away) and its slot goes to someone else. An item a training run waits
   for (priority > 0) is held for RUN_ITEM_IDLE_SECONDS only: the trainer is idle until it is labelled, so an
   annotator who leaves it alone that long loses it to the next one (the Rate/Rank tab renews the hold while
   its user is active on it, keep_holding).
   A page load takes no run item (next_item's run_items=False): opening the app on another tab, or as an
   admin who does not label, once held a run's item until the run gave up on it.
3. Gold items (a known answer, for quality control) are not capped by the overlap: every annotator meets
   each gold item once, in the same order as any other item, or gold accuracy could only be measured for
   the first k annotators. Nothing in a QueueItem tells a gold item apart.

Picking the item and inserting the pending assignment happen in one BEGIN IMMEDIATE transaction, so
two users asking at the same moment are served one after the other and never both get an item with
overlap 1. A submit is idempotent: the same request_id, or the same value for an item already labelled,
returns the stored label with created=False. Every QueueItem carries a fresh request_id for that purpose,
and submit_*_and_next store a label and serve the next item in one transaction (one round trip per label).

Cost: which items are still open and the per-user counts are kept by triggers (storage/migrations.py,
QUEUE_COUNTERS), so serving an item and counting done/remaining do not grow with the number of items.

The package owns items, assignments, ratings and rankings, one module per job: `store` (their one writer, and
the reads other services make: human rewards, active selection, the arena, chat, the labels import, runs, accounts
and the record browser's corrections go through it; a view joining them with other tables says so in its own
module docstring), `items` (creating items), `queue` (the queue and its holds), `submit` (submit, skip, undo) and
`gold` (known answers). Callers import the package: its names are those of the modules below.

`accounts` imports `store` (deactivating an account releases its holds), which runs this file first, and `queue`
and `submit` need `accounts.require_user`: they import the accounts module, not its names, so either may be
imported first (tests/test_layers.py imports accounts first in a fresh interpreter).
"""
from labeler.services.data.labeling.store import (  # noqa: F401  (the package's names)
    EVALUATION_SOURCE, KINDS, LABEL_TABLES, WAITING_FOR_RUN, Kind, add_assignment, check_kind, delete_label_row,
    drop_assignment, drop_pending_holds, find_item, insert_item, insert_ranking, item_response_ids, label_count, label_row,
    ranking_orders, rankings_from, rating_means, release_ended_run, release_items, release_run_items,
    response_ids_json, run_of_item, selectable_items, set_rating_score, set_ranking_order, set_selection_order,
    unreleased_run_items, waiting_for_run)
from labeler.services.data.labeling.items import (  # noqa: F401
    MAX_RANKING_SIZE, MIN_RANKING_SIZE, check_ranking_size, create_items, group_sizes, requeue_prompts)
from labeler.services.data.labeling.queue import (  # noqa: F401
    PENDING_TTL_MINUTES, RUN_ITEM_IDLE_SECONDS, QueueItem, keep_holding, next_item, progress)
from labeler.services.data.labeling.submit import (  # noqa: F401
    MAX_COMMENT_CHARS, SHOWN, ItemUnavailable, LabelResult, Undone, skip_item, submit_rating, submit_rating_and_next,
    submit_ranking, submit_ranking_and_next, undo_last_action)
from labeler.services.data.labeling.gold import item_detail, item_on_scale, set_gold  # noqa: F401
