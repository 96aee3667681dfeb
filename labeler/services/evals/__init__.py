"""Judging models: held-out evaluations and their verdict, a project's measure, people's blind pairs, each
criterion's win rate and the reward-model inspector."""
