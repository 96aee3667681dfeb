"""File readers: CSV, JSONL, JSON arrays, .txt, Parquet and saved `datasets` folders.

Each reader yields `(Where, record)`: where the record came from (line for text files, row for Parquet and
datasets) and a dict. Text files are checked for invalid UTF-8 and NUL bytes up front, with the line of the
first bad byte, because a half-decoded prompt silently corrupts a dataset. Readers only parse; what a record
must contain is checked by the importer (prompts.py, labels_import.py), which raises `where.error(...)`.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from labeler.services.errors import InputError

TEXT_SUFFIXES = {".csv", ".tsv", ".jsonl", ".ndjson", ".json", ".txt"}
SUPPORTED = ".csv, .tsv, .jsonl, .ndjson, .json, .txt, .parquet or a saved datasets folder"


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
        raise InputError("file not found", file=str(path))
    if path.is_dir():
        return _read_datasets_folder(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet(path)
    if suffix not in TEXT_SUFFIXES:
        raise InputError(f"unsupported file type '{suffix or path.name}' (use {SUPPORTED})", file=str(path))
    text = decode_text(path)
    if suffix in (".csv", ".tsv"):
        return _read_csv(path, text, delimiter="\t" if suffix == ".tsv" else ",")
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(path, text)
    if suffix == ".json":
        return _read_json(path, text)
    return _read_txt(path, text, txt_field)


def decode_text(path: Path) -> str:
    """The file as text: strict UTF-8 (a leading BOM is dropped), no NUL bytes; errors name the line."""
    data = path.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError("NUL byte in file (binary or UTF-16 file?)", file=str(path), line=data.count(b"\n", 0, nul) + 1)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise InputError(f"invalid UTF-8 (byte 0x{data[error.start]:02x}); save the file as UTF-8", file=str(path), line=line) from None


def _read_txt(path: Path, text: str, field: str) -> Iterator[tuple[Where, dict]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():  # blank lines separate nothing and are skipped
            yield Where(str(path), number), {field: line}


def _read_jsonl(path: Path, text: str) -> Iterator[tuple[Where, dict]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = Where(str(path), number)
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise where.error(f"invalid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict):
            raise where.error(f"expected a JSON object, got {type(record).__name__}")
        yield where, record


def _read_json(path: Path, text: str) -> Iterator[tuple[Where, dict]]:
    """A JSON array of objects; positions are array rows (the file may be a single line)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"invalid JSON ({error.msg} at column {error.colno})", file=str(path), line=error.lineno) from None
    if not isinstance(data, list):
        raise InputError("expected a JSON array of objects (or use .jsonl, one object per line)", file=str(path))
    for number, record in enumerate(data, start=1):
        where = Where(str(path), number, unit="row")
        if not isinstance(record, dict):
            raise where.error(f"expected a JSON object, got {type(record).__name__}")
        yield where, record


def _read_csv(path: Path, text: str, delimiter: str) -> Iterator[tuple[Where, dict]]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
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
    import pyarrow.parquet as pq

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


# --- field checks shared by the importers ------------------------------------------------------------

ROLES = ("system", "user", "assistant", "tool")


def require_text(where: Where, record: dict, field: str) -> str:
    """record[field] as a non-empty string without NUL characters."""
    if field not in record or record[field] is None:
        raise where.error(f"missing '{field}' (columns present: {', '.join(map(str, record)) or 'none'})", field)
    value = record[field]
    if not isinstance(value, str):
        raise where.error(f"must be a string, got {type(value).__name__}", field)
    return check_text(where, value, field)


def check_text(where: Where, value: str, field: str) -> str:
    if "\x00" in value:
        raise where.error("contains a NUL character", field)
    if not value.strip():
        raise where.error("is empty", field)
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
