"""What the Train tab's run monitor shows, as plain values: a run's status line and progress bar, its charts
(server-drawn SVG), its before/after evaluation, the run history and the 'waiting for labels' banner.

Functions of a run row or of the database and a run id; the monitor (monitor.py) puts them into its widgets.
"""
from __future__ import annotations

import html
import os
import shlex

import gradio as gr
import pandas as pd

from labeler.services.evals import evaluation, measures, people_eval
from labeler.services.data import labeling
from labeler.services.execution import runs
from labeler.services.settings import training_stages
from labeler.services.settings.job_settings import JobConfig
from labeler.ui.charts import Series, bar_chart_svg, line_chart_svg

# Each stage's own charts (training_stages/), and the stages whose `steps` count generation batches.
DEFAULT_METRICS = {name: list(stage.metrics) for name, stage in training_stages.STAGES.items()}
ONLINE_STAGES = training_stages.names(online_trl=True)
JOB_STEPS_DEFAULT = JobConfig.__dataclass_fields__["steps"].default
HISTORY_COLUMNS = ["id", "stage", "status", "step", "total", "created", "by", "name"]
SAMPLE_COLUMNS = ["step", "query", "response", "reward"]
COMPARISON_COLUMNS = ["", "model", *evaluation.METRIC_LABELS.values(), evaluation.INTERVAL_LABEL]
ANSWER_COLUMNS = ["prompt", "before", "after"]
# The default plots, each the first of its names that the run logged (stages name the same thing differently),
# in plain words: what a person watches during a run. The full list is one click away ("All metrics").
DEFAULT_PLOTS = [
    ("Reward", ["env/reward_mean", "reward", "rewards/margins"]),
    ("KL to the starting model", ["objective/kl", "kl"]),
    ("Human labels used", ["human/labels_used"]),
    ("Online reward model agrees with people", ["rm_online/agreement"]),
]
# Plain titles for metrics a person knows by another name; any other metric is titled by its own name.
METRIC_TITLES = {
    "env/reward_mean": "Reward (mean per answer)", "reward": "Reward (mean per answer)",
    "objective/kl": "KL to the starting model", "kl": "KL to the starting model", "loss": "Training loss",
    "accuracy": "Reward model accuracy (chosen above rejected)", "rewards/margins": "Reward margin (chosen - rejected)",
    "human/labels_used": "Human labels used", "rm_online/agreement": "Online reward model agrees with people",
}


# What a chart's legend calls its line (the title says what is measured; the legend, in short, which line).
METRIC_LEGENDS = {
    "env/reward_mean": "mean reward", "reward": "mean reward", "objective/kl": "KL", "kl": "KL", "loss": "loss",
    "accuracy": "accuracy", "rewards/margins": "margin", "human/labels_used": "labels used",
    "rm_online/agreement": "agreement",
}


# Words for the parts of the names trainers log (TRL's names: "ppo/policy/clipfrac"), for the "All metrics" list:
# it showed 40 such names. The name itself stays the checkbox's value (what the charts and scripts go by).
METRIC_PARTS = {
    "ppo": "PPO", "grpo": "GRPO", "rloo": "RLOO", "kl": "KL", "approxkl": "approximate KL", "policykl": "policy KL",
    "kl_coef": "KL weight", "clipfrac": "share clipped", "val": "value", "vpred": "predicted value",
    "std": "spread", "var": "variance", "len": "length", "eos": "end of text", "env": "answers", "lr": "learning rate",
    "rlhf_reward": "reward minus KL penalty", "non_score_reward": "KL penalty", "scores": "scores",
    "logps": "log-probabilities", "rm": "reward model", "rm_online": "online reward model",
    "distinct_2": "distinct word pairs", "positive_share": "positive share", "grad_norm": "gradient norm",
    "num_tokens": "tokens seen", "frac_reward_zero_std": "share of groups with equal rewards", "ref": "reference",
    "eval": "held-out",
}


def metric_words(name: str) -> str:
    """A logged metric's name in words: its plain title (METRIC_TITLES), else its parts (METRIC_PARTS, else the
    part with spaces for underscores), the first as what it is about: "ppo/policy/clipfrac" -> "PPO: policy share
    clipped"."""
    if name in METRIC_TITLES:
        return METRIC_TITLES[name]
    parts = [METRIC_PARTS.get(part) or " ".join(METRIC_PARTS.get(word, word) for word in part.split("_"))
             for part in name.split("/") if part]
    if len(parts) == 1:
        return parts[0][:1].upper() + parts[0][1:]
    head = parts[0][:1].upper() + parts[0][1:]
    return f"{head}: {' '.join(parts[1:])}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m {seconds % 60:02d}s"


def asked_steps_note(run: runs.Run) -> str:
    """GRPO and RLOO count `steps` in generation batches, and their trainer reports optimizer steps (steps x
    mini-batches per generation x iterations / accumulation): 2 steps asked showed "4 / 4" without a word."""
    if run.stage not in ONLINE_STAGES:
        return ""
    asked = (run.config or {}).get("job", {}).get("steps", JOB_STEPS_DEFAULT)
    total = run.total_steps or 0
    if not isinstance(asked, int) or asked <= 0 or total == asked:
        return ""
    return f" (optimizer steps: the {asked} steps asked are generation batches)"


def progress_html(run: runs.Run | None) -> str:
    if run is None:
        return ""
    total = run.total_steps or 0
    eta = run.eta_seconds()
    text = f"step {run.step} / {total or '?'}{asked_steps_note(run)}"
    if run.status == "running":
        text += f" · elapsed {_duration(run.elapsed_seconds())} · ETA {_duration(eta)}"
    elif run.finished and run.started_at:
        text += f" · took {_duration(run.elapsed_seconds())}"
    return (f"<div id='train-progress'><progress max='{max(total, 1)}' value='{min(run.step, max(total, 1))}' "
            f"style='width:100%'></progress><div>{text}</div></div>")


def shown_command(command: str) -> str:
    """The run's command as a person reads it: the interpreter by its name, not the server's absolute path to it
    (which tells a reader nothing but the server's layout); the rest as stored, so it can be run again."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if words and os.path.isabs(words[0]):
        words[0] = os.path.basename(words[0])
    return shlex.join(words)


def status_markdown(run: runs.Run | None) -> str:
    if run is None:
        return "No run selected. Launch one above, or pick one from the history."
    line = f"### Run #{run.id} · {run.stage} · **{run.status}**"
    if run.stop_requested and run.status == "running":
        line += " (stopping after this step)"
    error = f"**error:** {html.escape(run.error.splitlines()[-1])}" if run.error else ""
    # The launcher's command line and the run's folder in a fold: they were the first lines every admin read,
    # above what the run is doing. Escaped, as the fold is HTML (Markdown's backticks do not apply inside it).
    command = f"<p>command: <code>{html.escape(shown_command(run.command))}</code></p>" if run.command else ""
    fold = (f"<details class='studio-run-details'><summary>Command and output folder</summary>{command}"
            f"<p>output: <code>{html.escape(str(run.output_dir))}</code></p></details>")
    return "\n\n".join(filter(None, [line, error, fold]))


def history_frame(db, project: str) -> pd.DataFrame:
    rows = [[r.id, r.stage, r.status, r.step, r.total_steps, r.created_at[:19].replace("T", " "), r.created_by or "",
             r.name] for r in runs.list_runs(db, project=project, limit=50)]
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS)


def run_choices(db, project: str) -> list[tuple[str, int]]:
    return [(f"#{r.id} {r.stage} {r.status}", r.id) for r in runs.list_runs(db, project=project, limit=50)]


def waiting_banner(db, project: str) -> dict:
    """'Run #N is waiting for K rankings (Rank tab) and J ratings (Rate tab)' while a human-reward run waits."""
    parts = []
    for run in runs.list_runs(db, project=project, status="running"):
        waiting = {kind: labeling.waiting_for_run(db, run.id, kind) for kind in ("ranking", "rating")}
        asks = [f"**{n}** {kind}s in the **{'Rank' if kind == 'ranking' else 'Rate'}** tab"
                for kind, n in waiting.items() if n]
        if asks:
            parts.append(f"⏳ Training run **#{run.id}** is waiting for {' and '.join(asks)}.")
    return gr.update(value="\n\n".join(parts), visible=bool(parts))


def default_metrics(stage: str, names: list[str]) -> list[str]:
    """The metrics plotted when nobody picked any: the DEFAULT_PLOTS the run has and the stage's own (a reward
    model's loss and accuracy), else the first two."""
    chosen = [next(n for n in group if n in names) for _, group in DEFAULT_PLOTS if any(n in names for n in group)]
    chosen += [n for n in DEFAULT_METRICS.get(stage, []) if n in names and n not in chosen]
    return chosen or names[:2]

# A batch's KL is estimated from the sampled answers (mean log-ratio, the k1 estimator): it can dip below 0 by
# chance although the KL itself never does. Shown as logged, with why, rather than clipped (clipping hides drift).
NEGATIVE_KL_NOTE = " (below 0: the batch estimate's noise; the true KL is never negative)"


def metrics_html(frame: pd.DataFrame, names: list[str], heldout: tuple[str, list[tuple[str, float]]] = ("", [])) -> str:
    """One small chart per metric (each on its own scale: a loss of 0.7 and a KL of 0.01 share no axis), titled
    in plain words with the metric's name in the legend; then the held-out bars (`heldout_bars`), once the run's
    evaluation exists. Every refresh sends the whole thing, so it never shows a blank chart."""
    panels = []
    for name in names:
        rows = frame[frame["name"] == name] if len(frame) else frame
        points = tuple((float(step), float(value)) for step, value in zip(rows["step"], rows["value"]))
        # The legend in words too (it read env/reward_mean); a metric with no plain title keeps its name.
        title = METRIC_TITLES.get(name, name)
        if name in ("objective/kl", "kl") and any(value < 0 for _, value in points):
            title += NEGATIVE_KL_NOTE
        panels.append(line_chart_svg([Series(name, points, METRIC_LEGENDS.get(name, name))], title=title))
    title, bars = heldout
    if bars:
        panels.append(bar_chart_svg(bars, title=title, percent=True))
    if not panels:
        panels.append(line_chart_svg([], title="Metrics", empty_text="No metrics yet: they appear after the first step"))
    return "<div class='studio-charts'>" + "".join(f"<div class='studio-chart-panel'>{p}</div>" for p in panels) + "</div>"


def reward_curve_html(curve: pd.DataFrame | None) -> str:
    points = () if curve is None else tuple(zip(curve["minutes"].astype(float), curve["reward"].astype(float)))
    return line_chart_svg([Series("env/reward_mean", points, "mean reward per answer")],
                          title="Mean reward by wall time",
                          x_title="minutes since the run started", x_integer=False,
                          empty_text="No rewards yet (policy runs log them)")


def heldout_bars(db, run_id: int | None) -> tuple[str, list[tuple[str, float]]]:
    """(title, bars) of a finished run's held-out evaluation: the model's win rate against its base (the base
    against itself is 50%) when its measure scored both, else the positive share before and after (VADER's
    threshold, the shipped task's); ("", []) without an evaluation."""
    if not run_id:
        return "", []
    before, after = evaluation.run_comparison(db, run_id)
    after = people_eval.with_people_verdict(db, run_id, after)  # people's win rate as they rank
    if after is None:
        return "", []
    if "eval/win_rate" in after.metrics:
        return ("Win rate against the base on held-out prompts",
                [("base (itself)", 0.5), ("after", after.metrics["eval/win_rate"])])
    if after.metrics.get("eval/positive_share") is None:
        return "", []
    bars = [("before (base)", before.metrics["eval/positive_share"])] if before and "eval/positive_share" in before.metrics else []
    return "Positive share on held-out prompts", bars + [("after", after.metrics["eval/positive_share"])]


def comparison_frame(db, run_id: int | None) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The run's before/after evaluation (the base vs the trained model on the held-out prompts): metrics,
    the first answers side by side, and a line saying what was measured (or why there is nothing)."""
    empty = pd.DataFrame(columns=COMPARISON_COLUMNS), pd.DataFrame(columns=ANSWER_COLUMNS)
    if not run_id:
        return (*empty, "")
    before, after = evaluation.run_comparison(db, run_id)
    sentence, warnings = evaluation.run_verdict(db, run_id)
    after = people_eval.with_people_verdict(db, run_id, after)  # people's win rate and interval as they rank
    if after is None:
        if sentence:  # the evaluation failed: why, and what to do
            return (*empty, f"⚠ {sentence}")
        run = runs.find_run(db, run_id)
        if run is not None and run.stage in evaluation.POLICY_STAGES and not evaluation.heldout_prompts(db, run.project):
            return (*empty, "⚠ No held-out evaluation: " + evaluation.NO_HELDOUT.format(project=run.project) + ".")
        return (*empty, "No held-out evaluation for this run (policy runs are evaluated when they finish, on the "
                        "project's split 'test'; `rlhf-studio eval` evaluates any model).")
    rows = evaluation.comparison_rows([before, after], ["before (base)", "after"])
    metrics = pd.DataFrame(rows, columns=COMPARISON_COLUMNS).round(3)
    settings = after.settings
    n = settings["samples"]
    answers = []
    for p in range(min(5, settings["prompts_n"])):
        row = after.samples[p * n]
        prompt = row["prompt"][-1]["content"] if isinstance(row["prompt"], list) else row["prompt"]
        answers.append([prompt, before.samples[p * n]["answer"] if before else "", row["answer"]])
    note = (f"**{sentence}**\n\n" if sentence else "") + (
        f"{settings['prompts_n']} held-out prompts x {n} answers, {settings['max_new_tokens']} new tokens, "
        f"judged by {measures.describe(settings['reward'])}; win rate: every answer of the model against every "
        f"answer of its base to the same prompt (ties half, 95% interval {_interval(after.metrics)}); KL to "
        f"`{after.kl_base}` in nats per answer.")
    if settings["reward"] == measures.PEOPLE and (counts := people_line(db, run_id, after.model)):
        note += "\n\n" + counts
    note += "".join(f"\n\n⚠ {warning[0].upper()}{warning[1:]}." for warning in warnings if warning)
    return metrics, pd.DataFrame(answers, columns=ANSWER_COLUMNS), note


def _interval(metrics: dict) -> str:
    if "eval/win_low" not in metrics:
        return "n/a"
    return f"{metrics['eval/win_low']:.0%} to {metrics['eval/win_high']:.0%}"


def people_line(db, run_id: int, model: str) -> str:
    """What people's verdict so far is made of, for a run judged by people (it fills in as they rank the blind
    pairs); "" before the first ranking, which the verdict above already says (evaluation.people_waiting)."""
    result = people_eval.people_win_rate(db, run_id, model)
    if result is None:
        return ""
    return (f"People's verdict: the model won **{result.rate:.0%}** of {result.wins + result.ties + result.losses} "
            f"blind comparisons with its base (95% interval {result.low:.0%} to {result.high:.0%}; {result.wins} won, "
            f"{result.ties} tied, {result.losses} lost, on {result.prompts} prompts).")
