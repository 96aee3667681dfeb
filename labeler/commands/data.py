"""Data in and out: `prompts`, `labels import`, `export`, `backup`, `projects`.

Each handler opens the database, calls one service and prints a line; bad input raises InputError, which
the hub (labeler/cli.py) prints as one stderr line with exit status 2.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from labeler.forms import build_config, field_specs
from labeler.services.labels.active_learning import refresh_selection
from labeler.services.serving.answer_length import (AUTO_FIT_CAP, FIT_CAP, FIT_SAMPLE, fit_answer_tokens,
                                                    fit_new_project, needs_fit)
from labeler.errors import InputError
from labeler.services.labels.export import FORMATS, KINDS, ExportOptions, export
from labeler.services.training.hub import check_repo_id, push_export
from labeler.services.serving.inference import load_policy
from labeler.services.labels.labels_import import import_preferences
from labeler.services.evals.measures import GRAMMAR as MEASURES
from labeler.services.evals.measures import check_measure
from labeler.services.evals.measures import resolve as resolve_measure
from labeler.services.serving.models import resolve as resolve_model
from labeler.services.training import recommended_path, run_preview
from labeler.services.data.projects import (DEFAULT_ANSWER_TOKENS, DEFAULT_HELDOUT_SHARE, PROMPT_FORMATS, SELECTIONS,
                                            SET_BY_HAND, create_project, get_project, list_projects, update_project)
from labeler.services.data.prompts import (change_heldout_share, check_prompt_file, count_prompts, edit_prompt,
                                           heldout_status, import_prompts, import_shipped_prompts, list_prompts,
                                           promote_prompts, restore_prompts, retire_prompts, split_counts)
from labeler.services.labels.questions import add_question, check_specs, parse_question_spec
from labeler.services.data.readers import decode_text
from storage import backup, open_db


def register(subparsers, common: argparse.ArgumentParser) -> None:
    _register_prompts(subparsers, common)
    _register_labels(subparsers, common)
    _register_export(subparsers, common)
    backup_parser = subparsers.add_parser(
        "backup", parents=[common], help="copy the live database to a file (safe while the app runs)",
        description="A consistent copy of the database through SQLite's backup API, even while the app writes.",
    )
    backup_parser.add_argument("--out", required=True, help="file to write, e.g. backups/studio-2025-01-31.db")
    backup_parser.set_defaults(func=run_backup)
    _register_projects(subparsers, common)


def _open(args):
    return open_db(args.db)


# --- prompts ---------------------------------------------------------------------------------------------


def _register_prompts(subparsers, common) -> None:
    group = subparsers.add_parser(
        "prompts", help="import and list prompts", description="Import and list the prompts of a project."
    )
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    imp = actions.add_parser(
        "import", parents=[common], help="import prompts from a file or a saved datasets folder",
        description=(
            "Import prompts from CSV (a 'prompt' column), JSONL ({\"prompt\": ...} or {\"messages\": [...]}), JSON, "
            ".txt (one per line), Parquet or a saved datasets folder (every split). Duplicates are skipped; "
            "a bad row stops the import with its file, line and field, and nothing is written. A share of the "
            "project's prompts is held out of training and labelling to evaluate runs on (split 'test', chosen "
            "by a hash of each prompt); a 'split' column or a dataset's test/validation split is honoured."
        ),
    )
    imp.add_argument("file", help="the file (or datasets folder) to import")
    imp.add_argument("--source", default=None, help="label stored with each prompt (default: the file name)")
    imp.add_argument("--heldout-share", type=float, default=None, metavar="SHARE",
                     help="share of the project's prompts held out for evaluation, e.g. 0.1 (default: the project's, "
                          "10%% for a new project; a project holds none out until it has 20 prompts)")
    imp.add_argument("--split", choices=["train", "test"], default=None,
                     help="put every prompt of the file in this split (test: a file of evaluation prompts)")
    _add_fit_flags(imp)
    imp.set_defaults(func=run_prompts_import)
    shipped = actions.add_parser(
        "import-shipped", parents=[common], help="import the shipped movie-review openings",
        description="Import the movie-review openings shipped with RLHF Studio (the IMDB positive-review task).",
    )
    shipped.set_defaults(func=run_prompts_import_shipped)
    listing = actions.add_parser("list", parents=[common], help="list prompts with their answer counts",
                                 description="List the project's prompts, oldest first.")
    listing.add_argument("--limit", type=int, default=20, help="how many to show (default: 20)")
    listing.add_argument("--offset", type=int, default=0, help="how many to skip first (default: 0)")
    listing.set_defaults(func=run_prompts_list)
    promote = actions.add_parser(
        "promote", parents=[common], help="add prompts typed in Chat or Arena to the training prompts",
        description="Prompts annotators typed in Chat or Arena are kept apart (split 'chat': no training run, "
                    "Generate or Arena draw on them) until an admin reviews and promotes them (split 'train').",
    )
    promote.add_argument("ids", nargs="*", type=int, help="prompt ids to promote (default: every typed prompt)")
    promote.set_defaults(func=run_prompts_promote)
    _prompts_by_id(
        actions, common, "retire", run_prompts_retire, help="take prompts out of use, keeping their answers and labels",
        description="A retired prompt leaves the labelling queues (its unlabelled items go), training, evaluation "
                    "and Generate's work; its answers and labels are kept. `prompts restore` brings it back.",
    )
    _prompts_by_id(
        actions, common, "restore", run_prompts_restore, help="bring retired prompts back",
        description="Retired prompts go back to the split they had (training or held out), their answers to the "
                    "labelling queues.",
    )
    edit = actions.add_parser(
        "edit", parents=[common], help="fix a prompt's text before it has answers",
        description="Replace a prompt's text, while it has no answers (answers were given to the text as it was: "
                    "retire such a prompt and import the new text instead).",
    )
    edit.add_argument("id", type=int, metavar="ID", help="prompt id (see `prompts list`)")
    edit.add_argument("text", help="the new text")
    edit.set_defaults(func=run_prompts_edit)


def _prompts_by_id(actions, common, name: str, func, help: str, description: str) -> None:
    """A `prompts` action that takes one or more prompt ids (retire, restore)."""
    parser = actions.add_parser(name, parents=[common], help=help, description=description)
    parser.add_argument("ids", nargs="+", type=int, metavar="ID", help="prompt ids (see `prompts list`)")
    parser.set_defaults(func=func)


def run_prompts_retire(args) -> int:
    retired = retire_prompts(_open(args), args.project, args.ids)
    print(f"{retired} prompts retired in project '{args.project}' (their answers and labels are kept)")
    return 0


def run_prompts_restore(args) -> int:
    restored = restore_prompts(_open(args), args.project, args.ids)
    print(f"{restored} prompts restored in project '{args.project}'")
    return 0


def run_prompts_edit(args) -> int:
    row = edit_prompt(_open(args), args.project, args.id, args.text)
    print(f"prompt {row['id']} of project '{args.project}' now reads: {row['text'][:90]}")
    return 0


def run_prompts_promote(args) -> int:
    moved = promote_prompts(_open(args), args.project, args.ids or None)
    print(f"{moved} typed prompts moved to the training prompts of project '{args.project}'")
    return 0


def _add_fit_flags(parser) -> None:
    parser.add_argument("--no-fit-length", action="store_true",
                        help="keep the answer length as it is: by default a chat project whose length is still the "
                             "default gets it fitted to the base model's answers to a sample of its prompts (minutes on "
                             "a CPU when its answers run to the cap)")
    parser.add_argument("--fit-model", default="default", metavar="MODEL",
                        help="the base model whose answers fit the answer length: a registry name, 'default' or a "
                             "folder (default: default)")


def _fit_after_import(db, args, project: str) -> None:
    """A new chat project's answer length from its base model's answers (answer_length.fit_new_project): printed,
    never fatal."""
    if args.no_fit_length or not needs_fit(get_project(db, project)):
        return
    print(f"fitting the answer length: {args.fit_model} answers up to {FIT_SAMPLE} of the prompts "
          f"(up to {AUTO_FIT_CAP} tokens each; --no-fit-length skips this)...", flush=True)
    outcome = fit_new_project(db, project, lambda: load_policy(resolve_model(db, args.fit_model)), sample=FIT_SAMPLE,
                              cap=AUTO_FIT_CAP)
    if outcome.message:
        print(outcome.message)


def _print_import(result, what: str, project: str) -> None:
    skipped = f", {result.skipped} skipped (chosen == rejected)" if result.skipped else ""
    print(f"{result.added} {what} added to project '{project}', {result.duplicates} duplicates skipped{skipped}")


def _print_splits(db, project: str, result) -> None:
    counts = split_counts(db, project)
    print(f"{result.heldout} of them held out for evaluation; the project has {counts['train']} training and "
          f"{counts['test']} held-out prompts" + (f" ({result.note})" if result.note else
                                                  f" ({heldout_status(db, project)})"))


def run_prompts_import(args) -> int:
    db = _open(args)
    result = import_prompts(db, args.file, project=args.project, source=args.source,
                            heldout_share=args.heldout_share, split=args.split)
    _print_import(result, "prompts", args.project)
    _print_splits(db, args.project, result)
    _fit_after_import(db, args, args.project)
    return 0


def run_prompts_import_shipped(args) -> int:
    _print_import(import_shipped_prompts(_open(args), project=args.project), "prompts", args.project)
    return 0


def run_prompts_list(args) -> int:
    db = _open(args)
    rows = list_prompts(db, project=args.project, limit=args.limit, offset=args.offset)
    for row in rows:
        text = row["text"].replace("\n", " ")
        turns = f" [{len(row['messages'])} messages]" if row["messages"] else ""
        print(f"{row['id']:>6}  {row['responses']:>3} answers  {text[:90]}{turns}")
    print(f"{len(rows)} of {count_prompts(db, args.project)} prompts in project '{args.project}'")
    return 0


# --- labels ----------------------------------------------------------------------------------------------


def _register_labels(subparsers, common) -> None:
    group = subparsers.add_parser("labels", help="import preference labels", description="Import labels made elsewhere.")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    imp = actions.add_parser(
        "import", parents=[common], help="import a TRL preference dataset (prompt, chosen, rejected)",
        description=(
            "Import a TRL preference dataset (JSONL, JSON, Parquet or a saved datasets folder; standard or "
            "conversational): each pair becomes a ranking item with one ranking (source 'import')."
        ),
    )
    imp.add_argument("file", help="the preference file or datasets folder")
    imp.set_defaults(func=run_labels_import)


def run_labels_import(args) -> int:
    _print_import(import_preferences(_open(args), args.file, project=args.project), "preference pairs", args.project)
    return 0


# --- export ----------------------------------------------------------------------------------------------


def _register_export(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "export", parents=[common], help="write labels as a TRL dataset (preferences, ratings, unpaired)",
        description=(
            "Write labels as a dataset TRL and rlhf/ trainers read unchanged: preferences (prompt, chosen, "
            "rejected), ratings (prompt, completion, score, n, std) or unpaired (prompt, completion, label)."
        ),
    )
    parser.add_argument("--kind", choices=KINDS, default="preferences", help="which rows (default: preferences)")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default="jsonl",
                        help="jsonl, parquet, hf (a datasets folder with train/test splits) or csv (default: jsonl)")
    parser.add_argument("--out", required=True, help="file to write (a folder for --format hf)")
    parser.add_argument("--push-to-hub", metavar="REPO", default=None,
                        help="then push the folder (--format hf) to this Hub dataset repository, owner/name; needs "
                             "the network and a token (HF_TOKEN or huggingface-cli login)")
    parser.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")
    # The filter flags come from ExportOptions' fields (labeler/forms.py), like the Data tab's form:
    # adding an option to the dataclass adds the flag. Values are parsed by forms.build_config.
    for spec in field_specs(ExportOptions):
        flag = "--" + spec.name.replace("_", "-")
        if spec.kind == "bool":
            parser.add_argument(flag, dest=f"opt_{spec.name}", action="store_true", help=spec.help)
        else:
            metavar = "NAMES" if spec.name == "annotators" else spec.name.upper()
            default = f" (default {spec.default})" if spec.default is not None else ""
            help_text = "comma-separated usernames; only their labels" if spec.name == "annotators" else spec.help + default
            parser.add_argument(flag, dest=f"opt_{spec.name}", default=None, metavar=metavar, help=help_text)
    parser.set_defaults(func=run_export)


def run_export(args) -> int:
    values = {key[4:]: value for key, value in vars(args).items() if key.startswith("opt_") and value not in (None, False)}
    annotators = values.pop("annotators", None)  # comma-separated text, split by ExportOptions itself
    options = build_config(ExportOptions, values)
    if annotators is not None:
        options = dataclasses.replace(options, annotators=annotators)
    if args.push_to_hub is not None:  # refuse before exporting, not after
        check_repo_id(args.push_to_hub)
        if args.fmt != "hf":
            raise InputError("--push-to-hub needs --format hf (a datasets folder with its card)", field="format")
    result = export(_open(args), args.project, args.kind, args.fmt, args.out, options)
    print(f"wrote {result.rows} {args.kind} rows to {result.path}")
    if args.push_to_hub is not None:
        print(f"pushed to {push_export(result.path, args.push_to_hub, private=args.private)}")
    return 0


def run_backup(args) -> int:
    print(f"backed up {args.db} to {backup(_open(args), args.out)}")
    return 0


# --- projects --------------------------------------------------------------------------------------------


def _register_projects(subparsers, common) -> None:
    group = subparsers.add_parser(
        "projects", help="create, list and configure projects",
        description="A project is a set of prompts with its own rating scale, overlap and guidelines.",
    )
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[common], help="create a project", description="Create a project.")
    create.add_argument("name", help="the new project's name")
    update = actions.add_parser(
        "set", parents=[common], help="change a project's settings",
        description="Change a project's Likert range, overlap or guidelines; unset options keep their value.",
    )
    update.add_argument("name", help="the project to change")
    for flag, text, default in (("--likert-min", "lowest score", 1), ("--likert-max", "highest score", 7),
                                ("--overlap", "annotators per item, for agreement statistics", 1)):
        create.add_argument(flag, type=int, default=default, help=f"{text} (default {default})")
        update.add_argument(flag, type=int, default=None, help=f"{text} (default: unchanged)")
    for parser in (create, update):
        parser.add_argument("--guidelines", default=None,
                            help="markdown file with the annotation guidelines, for ratings and rankings alike")
        parser.add_argument("--ranking-guidelines", default=None,
                            help="markdown file with other guidelines for rankings (default: those of --guidelines)")
    formats = "; ".join(f"{name}: {text}" for name, text in PROMPT_FORMATS.items())
    create.add_argument("--prompt-format", choices=list(PROMPT_FORMATS), default="chat",
                        help=f"how prompts reach the model in generation, training and evaluation ({formats}; default chat)")
    create.add_argument("--answer-tokens", type=int, default=None,
                        help="answer length in tokens for generation, training, evaluation, chat and the arena "
                             f"(default: {DEFAULT_ANSWER_TOKENS['chat']} for chat, {DEFAULT_ANSWER_TOKENS['continue']} "
                             "for continue)")
    update.add_argument("--answer-tokens", type=int, default=None, help="answer length in tokens (default: unchanged)")
    update.add_argument("--measure", default=None,
                        help=f"how runs are judged on the held-out prompts: {MEASURES} (default: unchanged)")
    update.add_argument("--heldout-share", type=float, default=None, metavar="SHARE",
                        help="share of the prompts held out for evaluation; re-splits the prompts there are, only "
                             "before the first label (default: unchanged)")
    update.add_argument("--prompt-format", choices=list(PROMPT_FORMATS), default=None,
                        help=f"how prompts reach the model ({formats}; default: unchanged)")
    selections = "; ".join(f"{name}: {text}" for name, text in SELECTIONS.items())
    update.add_argument("--selection", choices=list(SELECTIONS), default=None,
                        help=f"which item annotators get next ({selections}; default: unchanged)")
    create.add_argument("--heldout-share", type=float, default=DEFAULT_HELDOUT_SHARE, metavar="SHARE",
                        help=f"share of imported prompts held out for evaluation (default {DEFAULT_HELDOUT_SHARE:g})")
    create.add_argument("--criterion", action="append", default=[], metavar="NAME[:MIN-MAX][:GUIDELINE]",
                        help="a criterion people score beside the project's own score, e.g. 'safe:1-3:Could it hurt "
                             "anyone?' (repeatable; scale 1-5 unless given; more later with `rlhf-studio questions add`)")
    create.add_argument("--flag", action="append", default=[], metavar="NAME[:GUIDELINE]",
                        help="a flag people may tick on an answer, e.g. spam (repeatable)")
    create.add_argument("--prompts", default=None, metavar="FILE",
                        help="import this prompt file into the new project (as `prompts import` does), and for a chat "
                             "project without --answer-tokens fit the answer length to the base model's answers")
    _add_fit_flags(create)
    create.set_defaults(func=run_projects_create)
    fit = actions.add_parser(
        "fit-length", parents=[common], help="set the answer length from the base model's own answers",
        description="Let the model answer a sample of the project's training prompts once (up to --cap tokens) and "
                    "set the answer length to the shortest (in steps of 16 tokens) within which 90%% of its answers "
                    "end on their own, so that people rank whole answers.")
    fit.add_argument("name", help="project name")
    fit.add_argument("--model", default="default", help="the base model: a registry name, 'default' or a folder")
    fit.add_argument("--sample", type=int, default=FIT_SAMPLE, help=f"prompts answered (default {FIT_SAMPLE})")
    fit.add_argument("--cap", type=int, default=FIT_CAP, help=f"the longest length fitted (default {FIT_CAP})")
    fit.set_defaults(func=run_projects_fit_length)
    update.set_defaults(func=run_projects_set)
    listing = actions.add_parser(
        "list", parents=[common], help="list projects", description="List every project and its settings."
    )
    listing.set_defaults(func=run_projects_list)
    rescore = actions.add_parser(
        "rescore", parents=[common], help="refit the reward ensemble and re-order the open items now",
        description="Fit the project's preference ensemble on all its labels and score every open item by how much "
                    "labelling it would teach (what `serve` does in the background every few labels for projects "
                    "with --selection uncertainty).")
    rescore.add_argument("name", help="project name")
    rescore.set_defaults(func=run_projects_rescore)
    recommend = actions.add_parser(
        "recommend", parents=[common], help="which path to train: DPO, or a reward model then PPO",
        description="Say which path from rankings to a tuned model suits the project's labels and this machine "
                    "(the Train tab's line; the rule and its figures: docs/YOUR_TASK.md).")
    recommend.add_argument("name", nargs="?", help="project name (default: --project)")
    recommend.add_argument("--device", choices=("cpu", "gpu"), help="the hardware to recommend for (default: this "
                                                                    "machine's)")
    recommend.add_argument("--reusable-reward-model", action="store_true",
                           help="the team wants a reward model to keep (to score answers, or label online)")
    recommend.add_argument("--estimate", action="store_true",
                           help="also time a DPO run at its defaults here (a batch of the project's pairs is measured "
                                "in a fresh process, as `train dpo --dry-run` does)")
    recommend.set_defaults(func=run_projects_recommend)


def _guidelines(path: str | None) -> str | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise InputError("guidelines file not found", file=path)
    return decode_text(Path(path))


def _describe(db, project) -> str:
    guidelines = f", guidelines {len(project.guidelines)} chars" if project.guidelines else ""
    measure = resolve_measure(db, project.name).words  # what will judge the next run, and why
    return (f"{project.name}: Likert {project.likert_min}..{project.likert_max}, overlap {project.overlap}, "
            f"prompt format {project.prompt_format}, selection {project.selection}, answers of "
            f"{project.answer_tokens} tokens ({project.answer_length_origin}), measure {measure}, held-out share "
            f"{project.heldout_share:g}{guidelines}")


def run_projects_create(args) -> int:
    specs = ([parse_question_spec(text) for text in args.criterion]
             + [parse_question_spec(text, "flag") for text in args.flag])
    check_specs(specs)  # before the project: a bad criterion writes nothing
    if args.prompts is not None:
        check_prompt_file(args.prompts)  # and so does a bad prompt file
    db = _open(args)
    project = create_project(db, args.name, likert_min=args.likert_min, likert_max=args.likert_max,
                             overlap=args.overlap, guidelines=_guidelines(args.guidelines) or "",
                             ranking_guidelines=_guidelines(args.ranking_guidelines), prompt_format=args.prompt_format,
                             answer_tokens=args.answer_tokens, heldout_share=args.heldout_share)
    for spec in specs:
        add_question(db, project.name, **spec)
    asked = "".join(f", {spec['kind']} {spec['name']}" for spec in specs)
    print(f"created project {_describe(db, project)}{asked}")
    if args.prompts is not None:
        result = import_prompts(db, args.prompts, project=project.name)
        _print_import(result, "prompts", project.name)
        _print_splits(db, project.name, result)
        _fit_after_import(db, args, project.name)
    return 0


def run_projects_fit_length(args) -> int:
    db = _open(args)
    path = resolve_model(db, args.model)
    print(f"answering {args.sample} prompts with {args.model} (up to {args.cap} tokens each)...", flush=True)
    fitted = fit_answer_tokens(db, args.name, lambda: load_policy(path), sample=args.sample, cap=args.cap)
    print(f"answer length {fitted.tokens} tokens: {fitted.finished_share:.0%} of {fitted.answers} answers end within "
          f"it (generated with room for {fitted.cap})")
    return 0


def run_projects_rescore(args) -> int:
    from rlhf.preference_ensemble import FrozenTextEncoder  # a sentence encoder: torch

    report = refresh_selection(_open(args), args.name, FrozenTextEncoder())
    print(f"{report.project}: ensemble fitted on {report.pairs} preference pairs from {report.labels} labels; "
          f"{report.items_scored} open items scored")
    return 0


def run_projects_set(args) -> int:
    db = _open(args)
    measure = None if args.measure is None else check_measure(db, args.measure)  # refused before anything changes
    if args.heldout_share is not None:
        counts = change_heldout_share(db, args.name, args.heldout_share)
        print(f"held-out share {args.heldout_share:g}: {counts['train']} training and {counts['test']} held-out prompts"
              f" ({heldout_status(db, args.name)})")
    project = update_project(db, args.name, likert_min=args.likert_min, likert_max=args.likert_max,
                             overlap=args.overlap, guidelines=_guidelines(args.guidelines),
                             ranking_guidelines=_guidelines(args.ranking_guidelines or args.guidelines),
                             prompt_format=args.prompt_format, selection=args.selection,
                             answer_tokens=args.answer_tokens, measure=measure,
                             # typed, even as the default's value: a later import must not refit it
                             answer_tokens_origin=None if args.answer_tokens is None else SET_BY_HAND)
    print(f"updated project {_describe(db, project)}")
    return 0


def run_projects_recommend(args) -> int:
    db = _open(args)
    name = args.name or args.project
    minutes = {}
    if args.estimate:
        preview = run_preview.preview_run(db, name, "dpo", {})
        if preview.estimate is None:
            print(f"no DPO estimate: {preview.warnings[-1] if preview.warnings else 'no training pairs'}")
        else:
            minutes["dpo_minutes"] = preview.estimate.total_seconds / 60
    facts = recommended_path.project_facts(db, name, args.device,
                                           reusable_reward_model=args.reusable_reward_model, **minutes)
    print(f"{name}: {facts.rankings} rankings, {facts.pairs} pairs, {facts.training_prompts} training prompts, "
          f"{'a GPU' if facts.device == 'gpu' else 'a CPU'}")
    print(recommended_path.recommend(facts).line().replace("**", ""))
    return 0


def run_projects_list(args) -> int:
    db = _open(args)
    for project in list_projects(db):
        counts = split_counts(db, project.name)
        status = heldout_status(db, project.name)
        print(f"{_describe(db, project)}, {count_prompts(db, project.name)} prompts ({counts['test']} held out"
              + (f": {status})" if status else ")"))
    return 0
