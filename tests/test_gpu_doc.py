"""docs/GPU.md's copy-paste steps are real commands: each `rlhf-studio ...` line parses with the CLI's own parser,
and every `--set KEY=VALUE` of a `train` line names a setting of that stage (a job setting or its trainer's)."""
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "GPU.md"


def doc_commands(text: str) -> list[str]:
    """The `rlhf-studio` lines of the doc's bash blocks, comments and continuation lines joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("rlhf-studio "):
                commands.append(line)
    return commands


def test_doc_has_the_whole_path():
    commands = doc_commands(DOC.read_text())
    starts = [" ".join(shlex.split(c)[1:3]) for c in commands]
    for step in ("models add", "projects create", "prompts import", "generate --project", "users add", "serve --project",
                 "train rm", "train ppo", "train dpo", "eval --project", "chat --project"):
        assert any(s.startswith(step) for s in starts), f"docs/GPU.md has no `rlhf-studio {step} ...` step"
    ppo = next(c for c in commands if c.startswith("rlhf-studio train ppo"))
    assert "reward=rm:" in ppo


@pytest.mark.parametrize("command", doc_commands(DOC.read_text()))
def test_doc_command_parses(command):
    from labeler.cli import build_parser
    from labeler.services.settings import job_settings
    from labeler.services.training import train_configs

    words = shlex.split(command)[1:]
    try:
        args = build_parser().parse_args(words)
    except SystemExit as error:
        raise AssertionError(f"docs/GPU.md: `{command}` does not parse (exit {error.code})") from None
    if args.command == "train":
        from labeler.forms import field_specs

        known = {spec.name for section in job_settings.SECTIONS for spec in field_specs(section)}
        known |= {spec.name for spec in field_specs(train_configs.stage_config_class(args.stage))}
        for setting in args.set:
            key = setting.split("=", 1)[0]
            assert key in known, f"docs/GPU.md: `{command}`: {key!r} is no setting of train {args.stage}"


def test_the_check_catches_a_wrong_command():
    from labeler.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(shlex.split("generate --project support --answers 2"))
