"""An admin's typed gold answer ('6', '3 > 1 = 2' or JSON), read the same by the Admin tab's Quality part and the
Records tab's corrections."""
from __future__ import annotations

import json

from labeler.errors import InputError


def parse_gold(text: str) -> dict | None:
    """The gold answer typed by an admin: '5' for a rating, '3 > 1 = 2' (best first, = ties) or JSON.

    '3 > 1 = 2' means response 3 is best, 1 and 2 tie below it: {"order": [[3], [1, 2]]}. Blank clears.
    """
    text = (text or "").strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            gold = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON: {error.msg}", field="gold") from None
        if not isinstance(gold, dict):
            raise InputError("expected a JSON object like {\"score\": 5}", field="gold")
        return gold
    if ">" not in text and "=" not in text:
        try:
            return {"score": float(text) if "." in text else int(text)}
        except ValueError:
            raise InputError(f"{text!r} is neither a score nor an order like '3 > 1 = 2'", field="gold") from None
    order = []
    for group in text.split(">"):
        try:
            ids = [int(part) for part in group.split("=")]
        except ValueError:
            raise InputError(f"{group.strip()!r}: response ids must be whole numbers", field="gold") from None
        order.append(ids)
    return {"order": order}
