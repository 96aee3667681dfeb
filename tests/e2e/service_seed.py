"""Items written through the services, as a background generation would leave them, for browser and web API tests
that need something new in an annotator's queue."""


def add_answered_prompt(db_path: str, prompt: str, answers: int, kind: str, source: str) -> list[int]:
    """A prompt, `answers` answers to it and their items of `kind` (one rating item per answer, or one ranking item
    of all of them). Returns the answers' ids."""
    from labeler.services.data import labeling, prompts
    from labeler.services.data.responses import insert_response
    from storage import open_db, write_transaction

    db = open_db(db_path)
    try:
        prompts.add_prompts(db, [prompt], source=source)
        prompt_id = db.execute("SELECT id FROM prompts WHERE text = ?", [prompt]).fetchone()[0]
        # In training: the held-out share may hold a new prompt out, and a held-out prompt takes no training label.
        db.execute("UPDATE prompts SET split = 'train' WHERE id = ?", [prompt_id])
        with write_transaction(db):
            ids = [insert_response(db, prompt_id, f"{prompt}: answer {k + 1}", model="m", source="generated")
                   for k in range(answers)]
        labeling.create_items(db, "default", response_ids=ids, ranking_size=max(answers, 2), kinds=(kind,))
        return ids
    finally:
        db.conn.close()
