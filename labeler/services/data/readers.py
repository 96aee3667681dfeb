"""File readers: CSV, JSONL, JSON arrays, .txt, Parquet and saved `datasets` folders.

Each reader yields `(Where, record)`: where the record came from (line for text files, row for Parquet and
datasets) and a dict. Every string of every record is checked for NUL characters and for bytes that are not
UTF-8 (text files are decoded with surrogateescape, so a bad byte survives parsing and is reported with its
line AND field), because a half-decoded prompt silently corrupts a dataset and SQLite cannot store it.
Readers only parse; what a record must contain is checked by the importer (prompts.py, labels_import.py),
which raises `where.error(...)`.
"""
from __future__ import annotations

import csv
import io
import json
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from labeler.errors import InputError

TEXT_SUFFIXES = {".csv", ".tsv", ".jsonl", ".ndjson", ".json", ".txt"}
SUPPORTED = ".csv, .tsv, .jsonl, .ndjson, .json, .txt, .parquet, a saved datasets folder or a Hub dataset id"
# owner/name of a Hub dataset: read when no local file or folder has that name (and the Hub is reachable).
HUB_DATASET = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Where:
    """A record's position: `line N` in text files, `row N` (1-based, per split) in Parquet and datasets."""

    file: str
    number: int
    unit: str = "line"  # "line" or "row"
    split: str | None = None

    def error(self, message: str, field: str | None = None) -> InputError:
        if self.unit == "line":
            return InputError(message, file=self.file, line=self.number, field=field)
        # InputError only knows lines; a Parquet row is named as such so nobody opens the file looking for line 3.
        split = f" split '{self.split}'" if self.split else ""
        return InputError(message, file=f"{self.file}{split} row {self.number}", field=field)


def read_records(path: str | Path, txt_field: str = "prompt") -> Iterator[tuple[Where, dict]]:
    """Every record of a file or a saved datasets folder; a .txt line becomes {txt_field: line}."""
    path = Path(path)
    if not path.exists():
        if HUB_DATASET.match(str(path)) and path.suffix.lower() not in TEXT_SUFFIXES | {".parquet"}:
            return _checked(_read_hub_dataset(str(path)))
        raise InputError("file not found", file=str(path))
    if path.is_dir():
        return _checked(_read_datasets_folder(path))
    require_regular_file(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _checked(_read_parquet(path))
    if suffix not in TEXT_SUFFIXES:
        raise InputError(f"unsupported file type '{suffix or path.name}' (use {SUPPORTED})", file=str(path))
    text = path.read_bytes().decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")  # BOM: Excel's UTF-8
    if suffix in (".csv", ".tsv"):
        records = _read_csv(path, text, delimiter="\t" if suffix == ".tsv" else ",")
    elif suffix in (".jsonl", ".ndjson"):
        records = _read_jsonl(path, text)
    elif suffix == ".json":
        records = _read_json(path, text)
    else:
        records = _read_txt(path, text, txt_field)
    return _checked(records)


def require_regular_file(path: Path) -> None:
    """InputError for a FIFO, a device or a socket: reading one blocks forever (a FIFO nobody writes to) or never
    ends (/dev/zero), where a file that is being written or a typo was meant."""
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise InputError(f"cannot read ({error.strerror})", file=str(path)) from None
    if not stat.S_ISREG(mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
        raise InputError(f"is {kind}, not a regular file; give a file", file=str(path))


# JSON nested deeper than this is refused: no record the importers read nests more than a few levels, and
# Python's parser (and any recursive walk of the result) fails with RecursionError near 1,000 (1,100
# '[' gave a 31-line traceback).
MAX_JSON_DEPTH = 100


def load_json(text: str, where_error) -> object:
    """json.loads, with nesting deeper than MAX_JSON_DEPTH refused through `where_error(message)` (an InputError
    naming the place) instead of a RecursionError. JSONDecodeError is the caller's to report."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise where_error(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    return check_depth(value, where_error)


def check_depth(value, where_error):
    """`value` (parsed JSON or YAML) unless its lists and mappings nest deeper than MAX_JSON_DEPTH."""
    stack = [(value, 1)]
    while stack:  # iterative: a recursive walk would fail on the structure it checks
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise where_error(f"nested more than {MAX_JSON_DEPTH} levels deep")
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return value


def decode_text(path: Path) -> str:
    """A whole text file (guidelines): strict UTF-8 (a leading BOM is dropped), no NUL bytes; errors name the line."""
    require_regular_file(path)
    data = path.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError("NUL byte in file (binary or UTF-16 file?)", file=str(path), line=data.count(b"\n", 0, nul) + 1)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        message = f"invalid UTF-8 (byte 0x{data[error.start]:02x}); save the file as UTF-8"
        raise InputError(message, file=str(path), line=line) from None


def _bad_string(value, path: str) -> tuple[str, str] | None:
    """(field path, problem) of the first string in a record value that cannot be stored as text."""
    if isinstance(value, str):
        if "\x00" in value:
            return path, "contains a NUL byte (binary or UTF-16 file?)"
        for char in value:
            if "\ud800" <= char <= "\udfff":
                code = ord(char)
                what = f"byte 0x{code - 0xDC00:02x}" if code >= 0xDC80 else f"lone surrogate U+{code:04X}"
                return path, f"invalid UTF-8 ({what}); save the file as UTF-8"
    elif isinstance(value, dict):
        for key, item in value.items():
            found = _bad_string(key, path) or _bad_string(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _bad_string(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _checked(records: Iterator[tuple[Where, dict]]) -> Iterator[tuple[Where, dict]]:
    for where, record in records:
        found = _bad_string(record, "")
        if found:
            raise where.error(found[1], found[0] or None)
        yield where, record


def _lines(text: str) -> list[str]:
    # Not str.splitlines(): it also splits on U+2028, U+0085 and form feeds, which may sit inside a JSON string
    # or a prompt. Only \n (and \r\n) end a line, as in the editors that show the line numbers we report.
    return [line.removesuffix("\r") for line in text.split("\n")]


def _read_txt(path: Path, text: str, field: str) -> Iterator[tuple[Where, dict]]:
    for number, line in enumerate(_lines(text), start=1):
        if line.strip():  # blank lines separate nothing and are skipped
            yield Where(str(path), number), {field: line}


def _read_jsonl(path: Path, text: str) -> Iterator[tuple[Where, dict]]:
    for number, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        where = Where(str(path), number)
        try:
            record = load_json(line, where.error)
        except json.JSONDecodeError as error:
            raise where.error(f"invalid JSON: {_json_problem(error)}") from None
        if not isinstance(record, dict):
            raise where.error(f"expected a JSON object, got {type(record).__name__}")
        yield where, record


def _read_json(path: Path, text: str) -> Iterator[tuple[Where, dict]]:
    """A JSON array of objects; positions are array rows (the file may be a single line)."""
    try:
        data = load_json(text, lambda message: InputError(message, file=str(path)))
    except json.JSONDecodeError as error:
        raise InputError(f"invalid JSON: {_json_problem(error)}", file=str(path), line=error.lineno) from None
    if not isinstance(data, list):
        raise InputError("expected a JSON array of objects (or use .jsonl, one object per line)", file=str(path))
    for number, record in enumerate(data, start=1):
        where = Where(str(path), number, unit="row")
        if not isinstance(record, dict):
            raise where.error(f"expected a JSON object, got {type(record).__name__}")
        yield where, record


def _read_csv(path: Path, text: str, delimiter: str) -> Iterator[tuple[Where, dict]]:
    # strict: an unclosed quote is an error at the line it opens, not a prompt that silently swallows the rest
    # of the file (the lenient reader stored '"never closed' plus every later line as one prompt).
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as error:
        raise InputError(f"invalid CSV header ({error})", file=str(path), line=1) from None
    header = [name.strip() for name in header]
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise InputError(f"invalid CSV ({error})", file=str(path), line=start) from None
        where = Where(str(path), start)  # the line the record starts on (quoted cells may span lines)
        start = reader.line_num + 1
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(header):
            raise where.error(f"{len(row)} cells but the header has {len(header)} columns")
        # Short rows: missing trailing cells are absent fields, so "missing field" errors name them.
        yield where, dict(zip(header, row))


def _read_parquet(path: Path) -> Iterator[tuple[Where, dict]]:
    import pyarrow.parquet as pq  # optional here: only .parquet files need it

    try:
        parquet = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises several types for a file that is not Parquet
        raise InputError(f"not a readable Parquet file ({error})", file=str(path)) from None
    number = 0
    for batch in parquet.iter_batches(batch_size=4096):
        for record in batch.to_pylist():
            number += 1
            yield Where(str(path), number, unit="row"), record


def _read_datasets_folder(path: Path) -> Iterator[tuple[Where, dict]]:
    """A folder written by Dataset.save_to_disk or DatasetDict.save_to_disk (every split, in order)."""
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as error:
        raise InputError(f"not a saved datasets folder ({error})", file=str(path)) from None
    splits = loaded.items() if isinstance(loaded, datasets.DatasetDict) else [(None, loaded)]
    for split, dataset in splits:
        for number, record in enumerate(dataset, start=1):
            yield Where(str(path), number, unit="row", split=split), record


HUB_PROBE_TIMEOUT_S = 5.0  # one request asking the Hub whether the dataset exists, before any download


def _probe_hub(repo_id: str) -> None:
    """InputError at once when the Hub does not have `repo_id` or cannot be reached. Without it, an offline
    machine spent 25 s in datasets' retries (1+2+4+8+8 s) and printed 12 lines before the one that counts.
    With HF_HUB_OFFLINE set there is no request: datasets reads its local cache, failing at once."""
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    if huggingface_hub.constants.HF_HUB_OFFLINE:
        return
    try:
        huggingface_hub.HfApi().dataset_info(repo_id, timeout=HUB_PROBE_TIMEOUT_S)
    except RepositoryNotFoundError:
        raise InputError("no such local file or folder, nor a Hub dataset of that name (or it is private: "
                         "log in with `hf auth login`)", file=repo_id) from None
    except HfHubHTTPError:
        return  # the Hub answered (rate limit, gated, ...): datasets says what it is
    except Exception as error:  # noqa: BLE001 - a connection refused, a name not resolved, a timeout
        raise InputError(f"no such local file or folder, and the Hub cannot be reached ({type(error).__name__}); "
                         "offline, HF_HUB_OFFLINE=1 reads a dataset from the local cache", file=repo_id) from None


def _read_hub_dataset(repo_id: str) -> Iterator[tuple[Where, dict]]:
    """Every split of a Hub dataset (datasets.load_dataset), from the local cache when offline."""
    import datasets

    _probe_hub(repo_id)
    try:
        loaded = datasets.load_dataset(repo_id)
    except Exception as error:  # offline, unknown repository, no access, unreadable files: one line, not a traceback
        raise InputError(f"no such local file or folder, and the Hub dataset could not be loaded "
                         f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})",
                         file=repo_id) from None
    for split, dataset in loaded.items():
        for number, record in enumerate(dataset, start=1):
            yield Where(repo_id, number, unit="row", split=split), record


# --- field checks shared by the importers ------------------------------------------------------------

ROLES = ("system", "user", "assistant", "tool")


def require_text(where: Where, record: dict, field: str) -> str:
    """record[field] as a non-empty string without NUL characters."""
    if field not in record:
        raise where.error(f"missing '{field}' (columns present: {', '.join(map(str, record)) or 'none'})", field)
    if record[field] is None:  # {"prompt": null}, an empty Parquet cell: present, but no text
        raise where.error("is null: needs text", field)
    value = record[field]
    if not isinstance(value, str):
        raise where.error(f"must be a string, got {type(value).__name__}", field)
    return check_text(where, value, field)


# Longest imported text (a prompt, a message, an answer): about 25k tokens, beyond the default model's 8k
# context. A 10 MB prompt was once stored; it would only be truncated, or exhaust memory, at training time.
MAX_TEXT_CHARS = 100_000


def check_text(where: Where, value: str, field: str) -> str:
    if "\x00" in value:
        raise where.error("contains a NUL character", field)
    if not value.strip():
        raise where.error("is empty", field)
    if len(value) > MAX_TEXT_CHARS:
        raise where.error(f"{len(value):,} characters: at most {MAX_TEXT_CHARS:,}", field)
    return value


def check_messages(where: Where, value, field: str) -> list[dict]:
    """A list of {"role", "content"} messages with known roles and non-empty string contents."""
    if not isinstance(value, list) or not value:
        raise where.error(f"must be a non-empty list of {{'role', 'content'}} messages, got {type(value).__name__}", field)
    messages = []
    for index, message in enumerate(value):
        name = f"{field}[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or "content" not in message:
            raise where.error("must be an object with 'role' and 'content'", name)
        if message["role"] not in ROLES:
            raise where.error(f"unknown role {message['role']!r} (use {', '.join(ROLES)})", f"{name}.role")
        if not isinstance(message["content"], str):
            raise where.error(f"must be a string, got {type(message['content']).__name__}", f"{name}.content")
        check_text(where, message["content"], f"{name}.content")
        messages.append({"role": message["role"], "content": message["content"]})
    return messages


def _json_problem(error: json.JSONDecodeError) -> str:
    """json's message with its column; some messages already end in "at" ("Unterminated string starting at")."""
    message = error.msg[: -len(" at")] if error.msg.endswith(" at") else error.msg
    return f"{message} at column {error.colno}"
