"""`rlhf-studio chat` (talk to a model in the terminal, streamed) and `rlhf-studio models list/add/push/merge`."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TextIO

from labeler.commands import database
from labeler.commands.generate import add_settings_flags, passive_omp_threads, settings_from_args
from labeler.services.serving.chat import CHAT_SETTINGS, ChatRequest, ModelCache, stream_reply
from labeler.services.training.hub import push_model, write_registered_model_card
from labeler.services.serving.models import list_models, merge_adapter_model, register_model, resolve

HELP_LINE = "Type a message; /reset starts over, /exit (or Ctrl-D) quits."


def register(subparsers, common: argparse.ArgumentParser) -> None:
    chat = subparsers.add_parser(
        "chat", parents=[common], help="chat with a model in the terminal (answers stream in)",
        description=f"Chat with a registered model (or a local folder) in the terminal. {HELP_LINE}",
    )
    chat.add_argument("--model", default="default", help="registry name, 'default', or a local model folder (default: default)")
    chat.add_argument("--system", default="", help="system prompt (default: none, the model's template decides)")
    add_settings_flags(chat, CHAT_SETTINGS)
    chat.set_defaults(func=run_chat)

    group = subparsers.add_parser("models", help="list and register models", description="The model registry.")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="list registered models",
                                 description="List the registered models, oldest first.")
    listing.add_argument("--kind", default=None, choices=["base", "policy", "reward", "adapter"], help="only this kind")
    listing.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    listing.set_defaults(func=run_models_list)
    add = actions.add_parser(
        "add", parents=[common], help="register a model folder or hub id under a name",
        description="Register a local safetensors folder (or a hub id already in the local cache) under a name.",
    )
    add.add_argument("name", help="the name to use in --model, the Chat and Arena tabs")
    add.add_argument("path", help="a local model folder, or a hub id (owner/name)")
    add.add_argument("--kind", default="base", choices=["base", "policy", "reward", "adapter"], help="what it is (default: base)")
    add.set_defaults(func=run_models_add)
    push = actions.add_parser(
        "push", parents=[common], help="push a registered model's folder to the Hugging Face Hub",
        description="Upload a registered model's folder (weights or adapter, value head, tokenizer, its README.md "
                    "card, refreshed first) to a Hub model repository. Needs the network and a token (HF_TOKEN "
                    "or huggingface-cli login).",
    )
    push.add_argument("name", help="the registered model's name")
    push.add_argument("repo", help="the Hub repository, owner/name (created if missing)")
    push.add_argument("--private", action="store_true", help="create the repository private")
    push.set_defaults(func=run_models_push)
    merge = actions.add_parser(
        "merge", parents=[common], help="merge a registered LoRA adapter into a full model and register it",
        description="Merge a registered LoRA adapter (kind adapter, e.g. an SFT or DPO run with lora=true) into its "
                    "base weights: a full safetensors folder any plain AutoModelForCausalLM.from_pretrained loads "
                    "(no peft), registered as a policy.",
    )
    merge.add_argument("name", help="the registered adapter's name")
    merge.add_argument("--name", dest="output_name", default=None, help="registry name of the merged model (default: NAME-merged)")
    merge.add_argument("--out", default=None, help="folder to write (default: the adapter's folder name + '-merged', beside it)")
    merge.set_defaults(func=run_models_merge)


def run_chat(args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    passive_omp_threads()

    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    settings = settings_from_args(args, CHAT_SETTINGS)
    with database(args.db) as db:
        path = resolve(db, args.model)
    cache = ModelCache()
    cache.get(path)  # load before the first prompt, so the wait is not mistaken for a slow answer
    print(f"chatting with {args.model}. {HELP_LINE}", file=stdout)
    history: list[dict] = []
    turn = 0
    while True:
        stdout.write("you> ")
        stdout.flush()
        line = stdin.readline()
        if not line:  # EOF
            stdout.write("\n")
            return 0
        text = line.strip()
        if text in ("/exit", "/quit"):
            return 0
        if text == "/reset":
            history = []
            print("(conversation cleared)", file=stdout)
            continue
        if not text:
            continue
        history.append({"role": "user", "content": text})
        stdout.write(f"{args.model}> ")
        pieces = []
        # A different seed per turn: the same question asked twice need not get the same answer.
        turn_settings = dataclasses.replace(settings, seed=settings.seed + turn) if settings.do_sample else settings
        for piece in stream_reply(cache, ChatRequest(path, history, args.system or None, turn_settings)):
            pieces.append(piece)
            stdout.write(piece)
            stdout.flush()
        stdout.write("\n")
        history.append({"role": "assistant", "content": "".join(pieces)})
        turn += 1


def run_models_list(args: argparse.Namespace) -> int:
    with database(args.db) as db:
        rows = list_models(db, kind=args.kind)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    width = max([len(r["name"]) for r in rows] + [4])
    print(f"{'name':<{width}}  {'kind':<7}  {'run':>4}  path")
    for row in rows:
        print(f"{row['name']:<{width}}  {row['kind']:<7}  {row['run_id'] or '':>4}  {row['path']}")
    return 0


def run_models_add(args: argparse.Namespace) -> int:
    with database(args.db) as db:
        row = register_model(db, args.name, args.path, args.kind)
        write_registered_model_card(db, row["name"])  # README.md in the folder, unless it has someone else's
    print(f"registered {row['name']} ({row['kind']}): {row['path']}")
    return 0


def run_models_push(args: argparse.Namespace) -> int:
    with database(args.db) as db:
        url = push_model(db, args.name, args.repo, private=args.private)
    print(f"pushed {args.name} to {url}")
    return 0


def run_models_merge(args: argparse.Namespace) -> int:
    with database(args.db) as db:
        row = merge_adapter_model(db, args.name, output_name=args.output_name, out_dir=args.out)
        write_registered_model_card(db, row["name"])  # README.md in the merged folder
    print(f"merged {args.name} into {row['name']} ({row['kind']}): {row['path']}")
    return 0
