"""Example tasks that are not sentiment: each folder holds a prompt file a team might bring (`prompts.txt`, one
question or request per line, written for this bench) and a simulated judge of its own (`judge.py`, a pure
function `judge(prompts, answers) -> list[float]`, deterministic, no model), which plays the team's notion of
"better" in bench/own_task.py: the simulated people rank by it, and it measures the tuned model on held-out
prompts. The app takes a judge as a reward or a measure by its `module:function` spec, e.g.
`bench.tasks.concise.judge:judge` (the repository root on PYTHONPATH).

    concise   customer-support and how-to questions; better = covers the question, ends on a finished sentence,
              stays within a word budget, does not repeat itself
    formal    everyday requests (messages, replies, notes); better = a polite, formal register: no contractions,
              slang, exclamation marks or shouting
    explain   how-to questions scored on two criteria that conflict (issue 47): `complete` (points covered) and
              `short` (few words); judge.py's CRITERIA, bench/criteria_conflict.py
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Task:
    name: str

    @property
    def prompts(self) -> Path:
        return HERE / self.name / "prompts.txt"

    @property
    def judge_spec(self) -> str:
        """The judge as the app's reward/measure spec (reward_spec.py's module:function)."""
        return f"bench.tasks.{self.name}.judge:judge"

    def judge(self):
        import importlib

        return importlib.import_module(f"bench.tasks.{self.name}.judge").judge


TASKS = {name: Task(name) for name in ("concise", "formal", "explain")}
