"""Rank numbers to a ranking: one number per answer (1 = best), equal numbers a tie."""
from __future__ import annotations

from labeler.errors import InputError


def order_from_ranks(response_ids: list[int], ranks: list) -> list[list[int]]:
    """Best-to-worst groups from one rank number per response; equal numbers share a group.

    ranks may be gaps or dense (1, 1, 3 and 1, 1, 2 give the same order). A missing rank is an error,
    because an unranked answer would silently fall out of the training pairs.
    """
    if len(ranks) < len(response_ids):
        raise InputError("every answer needs a rank", field="rank")
    groups: dict[int, list[int]] = {}
    for position, (response_id, rank) in enumerate(zip(response_ids, ranks), start=1):
        if rank is None or rank == "":
            raise InputError(f"answer {position} has no rank: give every answer a number (1 = best)", field="rank")
        try:
            value = int(rank)
        except (TypeError, ValueError):
            raise InputError(f"answer {position}: rank {rank!r} is not a whole number", field="rank") from None
        if not 1 <= value <= len(response_ids):
            raise InputError(f"answer {position}: rank {value} is outside 1..{len(response_ids)}", field="rank")
        groups.setdefault(value, []).append(int(response_id))
    return [sorted(groups[rank]) for rank in sorted(groups)]
