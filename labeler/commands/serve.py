"""`rlhf-studio serve`: the web app, ready to label on the very first start.

First start on an empty database: the shipped movie-review prompts go into the default project (never into a
project a team created or changed), the `admin`
account is created and its one-time password printed here (like Jupyter's token), and a first set of
answers is generated in the background so the Rate and Rank tabs have work within a minute.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import threading

from labeler.commands import database
from labeler.services.data import accounts, projects, prompts
from labeler.services.serving import generation, models
from labeler.services.labels.active_learning import SelectionRefresher
from labeler.errors import InputError
from labeler.services.serving.inference import parse_bytes
from rlhf.loading import default_model_path

FIRST_PROMPTS = 16  # prompts answered in the background on the first start (x2 answers: ratings and rankings)
SESSION_DAYS = 7


def go_offline() -> None:
    """No hub downloads from this process: a hub id in the registry loads from the local cache or fails at once,
    instead of a web request waiting on the network (it once held the model cache's lock for 47 s).
    huggingface_hub reads HF_HUB_OFFLINE when imported, so the constant is set too if it already is."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    if "huggingface_hub.constants" in sys.modules:
        sys.modules["huggingface_hub.constants"].HF_HUB_OFFLINE = True


def register(subparsers, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "serve",
        parents=[common],
        help="start the labelling web app (login, Rate, Rank, Data, Train, Chat, Admin)",
        description=(
            "Start the web app. On the first start it imports the shipped prompts, creates the admin account "
            "(the one-time password is printed here) and generates a first set of answers in the background."
        ),
    )
    # Gradio's own environment variables give the defaults, as `python app.py` users of Gradio expect.
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="interface to listen on (0.0.0.0: every interface; default: $GRADIO_SERVER_NAME or 127.0.0.1)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                        help="port to listen on (default: $GRADIO_SERVER_PORT or 7860)")
    parser.add_argument("--root-path", default=os.environ.get("GRADIO_ROOT_PATH", ""),
                        help="the URL path the app is served under behind a reverse proxy, e.g. /studio "
                             "(default: $GRADIO_ROOT_PATH or none)")
    parser.add_argument(
        "--model", default="default",
        help="model that writes answers: a registry name, 'default' (bundled SmolLM2-135M) or a safetensors folder",
    )
    parser.add_argument("--max-file-size", default="50mb",
                        help="largest upload accepted, e.g. 50mb (uploads are for admins only; default: 50mb)")
    parser.add_argument("--max-upload-files", type=int, default=1,
                        help="files accepted in one upload request (default: 1; every upload field takes one)")
    parser.add_argument("--runs-dir", default="runs", help="where training runs write checkpoints and logs")
    parser.add_argument("--model-memory", default=None,
                        help="memory the loaded models (Chat, Arena, Data > Generate) may hold together, e.g. 8GiB "
                             "(default: half the GPU's memory, or a quarter of this machine's without a GPU); least "
                             "recently used out first")
    parser.add_argument(
        "--first-prompts", type=int, default=FIRST_PROMPTS,
        help=f"prompts answered in the background when the project has no answers (0: none; default {FIRST_PROMPTS})",
    )
    parser.add_argument(
        "--allowed-origin", action="append", default=[], metavar="ORIGIN",
        help="another origin whose browser requests are accepted, e.g. https://studio.example.org when a proxy "
             "rewrites the Host header (repeatable; default: only this server's own pages)",
    )
    parser.add_argument(
        "--forwarded-allow-ips", action="append", default=[], metavar="ADDRESS",
        help="a reverse proxy whose X-Forwarded-For (the client's address, which the login throttle counts by) and "
             "X-Forwarded-Proto are believed: an address or network such as 127.0.0.1 or 10.0.0.0/8 (repeatable, "
             "or comma-separated; default: none, not even 127.0.0.1)",
    )
    parser.add_argument(
        "--session-days", type=float, default=SESSION_DAYS,
        help=f"a login lasts this many days at most (default: {SESSION_DAYS})",
    )
    parser.add_argument(
        "--allow-hub-downloads", action="store_true",
        help="let registered hub ids download from the Hugging Face hub (default: offline, cached models only)",
    )
    parser.set_defaults(func=run)


def prepare(db_path: str, project: str, model: str) -> tuple[str | None, bool]:
    """Make the database ready to serve. Returns (one-time admin password or None, project has no answers)."""
    # The one place the web app creates and migrates the database; its requests then open it as is.
    with database(db_path, create=True) as db:
        try:
            current = projects.get_project(db, project)
        except InputError:
            current = projects.create_project(db, project)
        # The example task goes only into the default project as the database was created: a project a team
        # made (`projects create`), or whose settings they changed, keeps its prompts and settings untouched.
        if projects.is_untouched_default(db, current):
            result = prompts.import_shipped_prompts(db, project)
            print(f"Imported {result.added} shipped movie-review prompts into project '{project}'.", flush=True)
        if model == "default":
            print("Preparing the default model (converted to safetensors once, then cached)...", flush=True)
        models.resolve(db, model)  # an unknown name fails here, before the server starts
        if model == "default":
            default_model_path()
        password = accounts.ensure_admin(db)
        no_answers = projects.project_counts(db, project)["responses"] == 0
    return password, no_answers


def generate_first_answers(db_path: str, project: str, model: str, limit: int) -> None:
    """Runs in a background thread with its own connection; failures are printed, never fatal to the server."""
    with database(db_path) as db:
        try:
            ids = generation.generate_responses(db, project, model=model, n_per_prompt=2, limit=limit)
            print(f"Generated {len(ids)} first answers with '{model}': the Rate and Rank tabs have work.", flush=True)
        except Exception as error:  # noqa: BLE001 - a background helper must not take the server down
            print(f"Could not generate the first answers ({error}); use Data > Generate responses.", file=sys.stderr)


def proxy_addresses(values: list[str]) -> tuple[str, ...]:
    """--forwarded-allow-ips as given (repeated or comma-separated), each an IP address or network."""
    addresses = tuple(item.strip() for value in values for item in value.split(",") if item.strip())
    for address in addresses:
        try:
            ipaddress.ip_network(address, strict=False)
        except ValueError:
            raise InputError(f"{address!r} is not an IP address or network (e.g. 127.0.0.1 or 10.0.0.0/8)",
                             field="--forwarded-allow-ips") from None
    return addresses


def run(args: argparse.Namespace) -> int:
    if args.session_days <= 0:
        raise InputError(f"must be more than 0, got {args.session_days!r}", field="--session-days")
    if args.max_upload_files < 1:
        raise InputError(f"must be at least 1, got {args.max_upload_files!r}", field="--max-upload-files")
    forwarded_allow_ips = proxy_addresses(args.forwarded_allow_ips)
    model_memory = None if args.model_memory is None else parse_bytes(args.model_memory, field="--model-memory")
    if not args.allow_hub_downloads:
        go_offline()
    # A private labelling tool sends no usage analytics to Gradio unless the user turns them on.
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from labeler.ui.app import build_app, launch
    from labeler.ui.context import ServeSettings

    password, no_answers = prepare(args.db, args.project, args.model)
    settings = ServeSettings(
        db_path=args.db, host=args.host, port=args.port, model=args.model, project=args.project,
        max_file_size=args.max_file_size, max_upload_files=args.max_upload_files, runs_dir=args.runs_dir,
        allowed_origins=tuple(args.allowed_origin), session_max_age_s=args.session_days * 86400.0,
        root_path=args.root_path, forwarded_allow_ips=forwarded_allow_ips, model_memory_bytes=model_memory,
    )
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{args.port}/"
    print(f"\n    RLHF Studio: {url}", flush=True)
    if password is not None:
        print(
            "    First start: log in as user 'admin' with this one-time password\n"
            f"        {password}\n"
            "    (it is not stored in clear text, and until you replace it it opens only the form to choose your own)\n",
            flush=True,
        )
    # Built before the background thread starts: transformers' lazy imports are not thread-safe, and the
    # Train tab importing its Trainer while the thread imports the model classes once failed with ImportError.
    app = build_app(settings)
    if no_answers and args.first_prompts > 0:
        print(f"Generating first answers for {args.first_prompts} prompts in the background...", flush=True)
        threading.Thread(
            target=generate_first_answers, args=(args.db, args.project, args.model, args.first_prompts),
            name="first-answers", daemon=True,
        ).start()
    # Projects with selection 'uncertainty' get their queue re-ordered every few labels, in the background.
    SelectionRefresher(args.db).start()
    launch(app, settings, quiet=True)
    return 0
