"""The tables people fill, each with its one writer: projects, prompts (and the file readers they are read
with), answers, accounts and their login sessions, and labelling (labeling/: items, queue and holds, submit
and undo, gold) with the label kinds it validates."""
