"""`rlhf-studio questions`: a project's criteria and flags beyond its own score, and the rows they become."""
from __future__ import annotations

import argparse

from labeler.services.labels import question_rows, questions
from labeler.errors import InputError
from storage import open_db


def register(subparsers, common: argparse.ArgumentParser) -> None:
    group = subparsers.add_parser(
        "questions", help="a project's criteria and flags beside its score, and their training rows",
        description=(
            "Besides its own score (the criterion 'overall'), a project may ask people per criterion (a rating "
            "scale each, e.g. helpful 1-5, safe 1-3) and let them tick flags (spam, unsafe); every project also takes "
            "a correction of the shown answer and a written answer of one's own."
        ),
    )
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="the project's criteria and flags")
    listing.set_defaults(func=run_list)
    add = actions.add_parser(
        "add", parents=[common], help="add a criterion (NAME[:MIN-MAX][:GUIDELINE]) or, with --flag, a flag",
        description="Add a criterion, e.g. 'safe:1-3:Could this answer hurt anyone?' (scale 1-5 unless given), or "
                    "with --flag a flag, e.g. 'spam:Advertising or nonsense'. Allowed at any time.",
    )
    add.add_argument("spec", help="NAME[:MIN-MAX][:GUIDELINE] (a flag: NAME[:GUIDELINE])")
    add.add_argument("--flag", action="store_true", help="add a flag people may tick instead of a criterion")
    add.set_defaults(func=run_add)
    retire = actions.add_parser("retire", parents=[common], help="stop asking a question; its answers are kept")
    retire.add_argument("name", help="the criterion or flag")
    retire.set_defaults(func=run_retire)
    export = actions.add_parser(
        "export", parents=[common], help="people's answers beyond the score as TRL rows (JSON lines)",
        description="; ".join(f"{name}: {words}" for name, (_, _, words) in question_rows.ROW_KINDS.items()),
    )
    export.add_argument("--rows", required=True, choices=list(question_rows.ROW_KINDS), help="which rows")
    export.add_argument("--criterion", default=None, help="the criterion, for criterion-ratings/-preferences")
    export.add_argument("--out", required=True, help="the .jsonl file to write")
    export.set_defaults(func=run_export)


def run_list(args) -> int:
    db = open_db(args.db)
    for question in questions.criteria(db, args.project, include_retired=True) + [
            q for q in questions.list_questions(db, args.project) if q.kind == "flag"]:
        scale = f" {question.scale_min}-{question.scale_max}" if question.kind == "criterion" else ""
        retired = " (retired)" if question.retired else ""
        guideline = f": {question.guideline}" if question.guideline else ""
        print(f"{question.kind} {question.name}{scale}{retired}{guideline}")
    return 0


def run_add(args) -> int:
    question = questions.add_question(open_db(args.db), args.project,
                                      **questions.parse_question_spec(args.spec, "flag" if args.flag else "criterion"))
    print(f"added {question.kind} '{question.name}' to project '{args.project}'")
    return 0


def run_retire(args) -> int:
    question = questions.retire_question(open_db(args.db), args.project, args.name)
    print(f"retired {question.kind} '{question.name}' (its answers are kept)")
    return 0


def run_export(args) -> int:
    rows = question_rows.rows_of(open_db(args.db), args.project, args.rows, args.criterion)
    if not rows:
        raise InputError(f"nothing to export: no {args.rows} rows yet", field="rows")
    print(f"wrote {len(rows)} {args.rows} rows to {question_rows.write_jsonl(rows, args.out)}")
    return 0
