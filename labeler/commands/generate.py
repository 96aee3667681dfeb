"""`rlhf-studio generate`: answers to the project's prompts, stored and queued for labelling.

The sampling flags (--max-new-tokens, --temperature, ...) come from GenerationSettings' fields, help text
included (labeler/forms.py), so a new field is a new flag with nothing written here.
"""
from __future__ import annotations

import argparse
import dataclasses
import os

from tqdm import tqdm

from labeler import forms
from labeler.commands import database
from labeler.errors import InputError
from labeler.services.serving.generation import generate_responses
from labeler.services.data.projects import get_project
from rlhf.configs import GenerationSettings


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_settings_flags(parser: argparse.ArgumentParser, base: GenerationSettings = GenerationSettings(),
                       shown: dict[str, str] | None = None) -> None:
    """One flag per GenerationSettings field; unset flags keep `base`'s value (shown in the help, or the text in
    `shown` for a default that is not a constant)."""
    group = parser.add_argument_group("generation settings")
    for spec in forms.field_specs(GenerationSettings):
        default = (shown or {}).get(spec.name, getattr(base, spec.name))
        if spec.kind == "bool":
            group.add_argument(
                _flag(spec.name), dest=spec.name, action=argparse.BooleanOptionalAction, default=None,
                help=f"{spec.help} (default: {default})",
            )
        else:
            # Parsed later by forms.parse_value, so a bad value is an InputError naming the field.
            group.add_argument(_flag(spec.name), dest=spec.name, default=None, metavar=spec.kind.upper(),
                               help=f"{spec.help} (default: {default})")


def settings_from_args(args: argparse.Namespace, base: GenerationSettings = GenerationSettings()) -> GenerationSettings:
    """The flags given on the command line applied over `base`, validated by GenerationSettings itself."""
    values = {}
    for spec in forms.field_specs(GenerationSettings):
        raw = getattr(args, spec.name, None)
        if raw is not None:
            values[spec.name] = forms.parse_value(spec, raw, source=_flag(spec.name))
    try:
        return dataclasses.replace(base, **values)
    except ValueError as error:
        field = next((name for name in values if str(error).startswith(f"{name}=")), None)
        raise InputError(str(error), field=_flag(field) if field else None) from None


def register(subparsers, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "generate", parents=[common], help="generate answers to the project's prompts for labelling",
        description=(
            "Generate N answers per prompt with a model, store them, and create their rating and ranking items. "
            "Without --prompt-ids, only prompts with fewer than N answers from this model get new ones, "
            "so an interrupted run can simply be started again."
        ),
    )
    parser.add_argument("--model", default="default", help="registry name, 'default', or a local model folder (default: default)")
    parser.add_argument("--n", type=int, default=2, help="answers per prompt (default: 2)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts (default: all)")
    parser.add_argument("--prompt-ids", type=int, nargs="+", default=None, metavar="ID", help="only these prompts")
    add_settings_flags(parser, shown={"max_new_tokens": "the project's answer length (projects set --answer-tokens)"})
    parser.set_defaults(func=run_generate)


def passive_omp_threads() -> None:
    """Waiting OpenMP threads sleep instead of spinning (read when torch loads, so call this first): on a CPU
    shared with a server or other jobs, spinning threads made generation several times slower."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run_generate(args: argparse.Namespace) -> int:
    passive_omp_threads()

    with database(args.db) as db:
        # The project's answer length unless --max-new-tokens says otherwise: answers to questions need room, a
        # continuation of the shipped task's review openings does not.
        base = GenerationSettings(max_new_tokens=get_project(db, args.project).answer_tokens)
        settings = settings_from_args(args, base)
        bar = tqdm(total=0, unit="answer", desc=f"generating with {args.model}")

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        try:
            ids = generate_responses(
                db, args.project, model=args.model, n_per_prompt=args.n, settings=settings,
                prompt_ids=args.prompt_ids, limit=args.limit, progress=progress,
            )
        finally:
            bar.close()
    if not ids:
        print(f"nothing to do: every prompt already has {args.n} answer(s) from {args.model}")
    else:
        print(f"generated {len(ids)} answers with {args.model} (ids {ids[0]}-{ids[-1]}); rating and ranking items created")
    return 0
