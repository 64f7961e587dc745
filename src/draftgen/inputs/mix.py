"""A suite of datasets read as one stream: per-dataset limit, seeded shuffle, weighted shares.

Every file is read through ``ingest.read_conversations``; a shuffled JSONL file is read through a
byte-offset index (8 bytes a row, 12 with blank lines), never by holding its rows; a shuffled JSON
array or datasets directory by row position.
"""

from __future__ import annotations

import heapq
import os
import random
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, replace

from draftgen.errors import DraftgenError
from draftgen.inputs.ingest import (
    MAX_ROW_BYTES,
    Conversation,
    InputError,
    Rejection,
    RowError,
    parse_row,
    positional_rows,
    resolve_format,
)
from draftgen.inputs.ingest import count_rows as ingest_count
from draftgen.inputs.ingest import read_conversations as ingest_read


class MixError(DraftgenError, ValueError):
    """A dataset suite that cannot be read as asked; the message names the dataset and the fix."""


@dataclass(frozen=True)
class DatasetSpec:
    path: str
    name: str | None = None  # prefix of the rows' ids ("NAME/ID"); None: no prefix
    limit: int | None = None  # rows taken from this file at most (rejected rows count)
    shuffle: bool = False
    seed: int = 0
    weight: float = 1.0  # share of the suite's limit
    format: str | None = None  # input format override, passed on to ingest


@dataclass(frozen=True)
class Suite:
    datasets: tuple[DatasetSpec, ...]
    limit: int | None = None  # rows taken from the whole suite

    @classmethod
    def from_inputs(
        cls, paths: list[str], limit: int | None = None, format: str | None = None
    ) -> Suite:
        """``--input`` files: weight 1 each, ids unprefixed (as before suites existed)."""
        return cls(tuple(DatasetSpec(path=str(path), format=format) for path in paths), limit)

    @property
    def mixed(self) -> bool:
        """Whether rows are interleaved by share; plain ``--input`` files are read in turn."""
        return self.limit is not None or any(self._shaped(d) for d in self.datasets)

    @staticmethod
    def _shaped(spec: DatasetSpec) -> bool:
        return spec.name is not None or spec.limit is not None or spec.shuffle

    def check(self) -> None:
        """Raise ``MixError`` for the first dataset that cannot be read as asked."""
        if not self.datasets:
            raise MixError("the suite has no datasets: give --input FILE or [[datasets]] tables")
        names: dict[str, str] = {}
        for spec in self.datasets:
            where = f"dataset {spec.name or spec.path}"
            if not os.path.exists(spec.path):
                raise MixError(f"{where}: {spec.path} does not exist")
            if spec.limit is not None and spec.limit < 1:
                raise MixError(f"{where}: limit {spec.limit} must be at least 1")
            if not spec.weight > 0:
                raise MixError(f"{where}: weight {spec.weight} must be above 0")
            if spec.weight != 1.0 and self.limit is None:
                raise MixError(
                    f"{where}: weight is a share of the suite's limit, so set limit = N at the "
                    "top of the config (or --limit N), or drop the weight"
                )
            if spec.shuffle and not (is_jsonl(spec) or _positional(spec)):
                raise MixError(
                    f"{where}: shuffle reads rows by byte offset or position, which needs a "
                    "JSONL file, a JSON array or a datasets.save_to_disk directory; convert "
                    f"{spec.path} to JSONL or drop shuffle"
                )
            if spec.name is not None:
                if spec.name in names:
                    raise MixError(
                        f"{where}: the name is used by {names[spec.name]} too; give each "
                        "dataset its own name so their ids stay apart"
                    )
                names[spec.name] = spec.path
        if self.limit is not None and self.limit < 1:
            raise MixError(f"limit {self.limit} must be at least 1")


def is_jsonl(spec: DatasetSpec) -> bool:
    """Whether ingest reads this input line by line (so the offset index can read it)."""
    return os.path.isfile(spec.path) and _container(spec) == "jsonl"


def _container(spec: DatasetSpec) -> str | None:
    if not os.path.exists(spec.path):
        return None
    try:
        return resolve_format(spec.path, spec.format)[0]
    except InputError as exc:
        said = str(exc)
        if spec.name is None and said.startswith(spec.path):  # it names the file already
            raise MixError(said) from None
        raise MixError(f"dataset {spec.name or spec.path}: {said}") from None


def _positional(spec: DatasetSpec) -> bool:
    """Whether ingest can read this input's rows by position (for a shuffle)."""
    return _container(spec) == "json" or (_container(spec) == "hf" and os.path.isdir(spec.path))


def read_suite(suite: Suite) -> Iterator[Conversation | Rejection]:
    """Every row the suite yields, in the order a run works them."""
    suite.check()
    if not suite.mixed:
        for spec in suite.datasets:
            yield from _read_all(spec)
        return
    takes = shares(suite)
    streams = [_take(spec, take) for spec, take in zip(suite.datasets, takes, strict=True) if take]
    yield from _interleave(streams, [take for take in takes if take])


def count_suite(suite: Suite) -> int:
    """How many rows (conversations and rejections) ``read_suite`` yields."""
    suite.check()
    if not suite.mixed:
        return sum(available_rows(spec) for spec in suite.datasets)
    return sum(shares(suite))


def shares(suite: Suite) -> list[int]:
    """Rows taken from each dataset.

    Each takes all its rows up to its own ``limit``; with a suite ``limit``, the datasets split
    it by weight (largest remainders get the odd rows, earlier datasets first on ties), and a
    dataset with fewer rows than its share leaves the rest to the others, by weight again.
    """
    caps = []
    for spec in suite.datasets:
        rows = available_rows(spec)
        caps.append(rows if spec.limit is None else min(rows, spec.limit))
    if suite.limit is None:
        return caps
    takes = [0] * len(caps)
    left = min(suite.limit, sum(caps))
    while left > 0:
        open_ = [i for i, cap in enumerate(caps) if takes[i] < cap]
        total_weight = sum(suite.datasets[i].weight for i in open_)
        exact = {i: left * suite.datasets[i].weight / total_weight for i in open_}
        grant = {i: min(int(exact[i]), caps[i] - takes[i]) for i in open_}
        odd = left - sum(grant.values())
        for i in sorted(open_, key=lambda i: (-(exact[i] - int(exact[i])), i)):
            if odd == 0:
                break
            if grant[i] < caps[i] - takes[i]:
                grant[i] += 1
                odd -= 1
        for i, rows in grant.items():
            takes[i] += rows
        given = sum(grant.values())
        if given == 0:
            break
        left -= given
    return takes


def available_rows(spec: DatasetSpec) -> int:
    """Rows the file holds, counted the way ingest yields them (blank lines are no rows)."""
    if is_jsonl(spec):
        return count_jsonl_rows(spec.path)
    known = ingest_count(spec.path, spec.format)
    return known if known is not None else sum(1 for _ in _ingest(spec))


_BLANK_LINE = re.compile(rb"(?m)^[ \t\r\x0b\x0c]*\n")


def count_jsonl_rows(path: str) -> int:
    """Lines that are not blank, as ingest counts rows, read in 1 MiB blocks (no line loop)."""
    rows = 0
    tail = b""  # the unfinished last line of the blocks so far (shortened: only blankness counts)
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            cut = block.rfind(b"\n")
            if cut < 0:
                tail = _short(tail + block)
                continue
            whole = tail + block[: cut + 1]
            rows += whole.count(b"\n")
            if _may_hold_blank_line(whole):
                rows -= len(_BLANK_LINE.findall(whole))
            tail = _short(block[cut + 1 :])
    return rows + (1 if tail.strip() else 0)


def _may_hold_blank_line(lines: bytes) -> bool:
    # With the whitespace deleted (a C loop), a blank line is an empty one: the regex then
    # runs only on the rare blocks that have one.
    squeezed = lines.translate(None, b" \t\r\x0b\x0c")
    return squeezed.startswith(b"\n") or b"\n\n" in squeezed


def _short(tail: bytes) -> bytes:
    # A line longer than a block is one row whatever it holds; keep a marker, not the bytes.
    return tail if len(tail) <= 1 << 16 else (b"x" if tail.strip() else b"")


def _ingest(spec: DatasetSpec) -> Iterator[Conversation | Rejection]:
    return ingest_read([spec.path], format=spec.format)


def _named(item: Conversation | Rejection, spec: DatasetSpec) -> Conversation | Rejection:
    if spec.name is None or isinstance(item, Rejection):
        return item
    return replace(item, source_id=f"{spec.name}/{item.source_id}")


def _read_all(spec: DatasetSpec) -> Iterator[Conversation | Rejection]:
    for item in _ingest(spec):
        yield _named(item, spec)


def _take(spec: DatasetSpec, take: int) -> Iterator[Conversation | Rejection]:
    if spec.shuffle and not is_jsonl(spec):
        items = _positional_take(spec, take)
    elif spec.shuffle:
        index = RowIndex.build(spec.path)
        index.shuffle(spec.seed)
        items = index.read(spec.path, take, glaive=spec.format == "glaive")
    else:
        items = _ingest(spec)
    try:
        for count, item in enumerate(items):
            if count == take:
                return
            yield _named(item, spec)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # stopping at the limit: let go of the file now, not at collection


def _positional_take(spec: DatasetSpec, take: int) -> Iterator[Conversation | Rejection]:
    rows = positional_rows(spec.path, spec.format)
    order = shuffled_order(len(rows), spec.seed)
    for position in range(min(take, len(rows))):
        yield rows.parse(order[position] + 1)


def _interleave(
    streams: list[Iterator[Conversation | Rejection]], takes: list[int]
) -> Iterator[Conversation | Rejection]:
    """Rows of all streams, each dataset as evenly spread as its share allows.

    A dataset's k-th row goes at position (k + 0.5) / take of the run, so a run stopped half way
    holds about half of every dataset.
    """
    heap = [(0.5 / take, i, 0) for i, take in enumerate(takes)]
    heapq.heapify(heap)
    while heap:
        _, i, k = heapq.heappop(heap)
        item = next(streams[i], None)
        if item is None:
            continue  # fewer rows than counted: the file changed while reading
        yield item
        if k + 1 < takes[i]:
            heapq.heappush(heap, ((k + 1.5) / takes[i], i, k + 1))


class RowIndex:
    """Byte offsets of a JSONL file's rows, and the order to read them in.

    8 bytes a row for the offsets, 4 for the order once shuffled, and 8 more for line numbers
    only if blank lines make them differ from row numbers: never the rows themselves.
    """

    def __init__(self, offsets: array, lines: array | None, count: int) -> None:
        self.offsets = offsets
        self.lines = lines
        self.count = count
        self.order: array | None = None  # row ranks in reading order; None: file order

    def __len__(self) -> int:
        return self.count

    @classmethod
    def build(cls, path: str, keep: bool = True) -> RowIndex:
        """One pass over the file; with ``keep=False`` only the row count is kept."""
        offsets, lines = array("q"), array("q")
        count, line_no, blank_seen = 0, 0, False
        with open(path, "rb") as handle:
            while True:
                start = handle.tell()
                raw = handle.readline(MAX_ROW_BYTES + 1)
                if not raw:
                    break
                line_no += 1
                if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
                    _skip_rest_of_line(handle)
                elif not raw.strip():
                    blank_seen = True
                    continue
                count += 1
                if keep:
                    offsets.append(start)
                    lines.append(line_no)
        return cls(offsets, lines if blank_seen else None, count)

    def shuffle(self, seed: int) -> None:
        """A Fisher-Yates permutation of the rows, drawn from ``random.Random(seed).random()``.

        ``random()`` is the one part of the module Python promises to keep reproducible across
        versions, so a resume on another interpreter picks the same rows in the same order.
        """
        self.order = shuffled_order(self.count, seed)

    def read(
        self, path: str, take: int | None = None, glaive: bool = False
    ) -> Iterator[Conversation | Rejection]:
        """The first ``take`` rows in reading order, parsed and refused as ingest does."""
        label = os.path.basename(path)
        take = self.count if take is None else min(take, self.count)
        with open(path, "rb") as handle:
            for position in range(take):
                rank = self.order[position] if self.order is not None else position
                line = self.lines[rank] if self.lines is not None else rank + 1
                handle.seek(self.offsets[rank])
                raw = handle.readline(MAX_ROW_BYTES + 1)
                if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
                    yield Rejection(
                        input=path,
                        line=line,
                        reason=f"row is over the {MAX_ROW_BYTES >> 20} MiB limit of one row; "
                        "split or shorten it",
                    )
                    continue
                try:
                    yield parse_row(raw, label=label, input=path, line=line, glaive=glaive)
                except RowError as exc:
                    yield Rejection(input=path, line=line, reason=str(exc))


def shuffled_order(count: int, seed: int) -> array:
    """A Fisher-Yates permutation of ``range(count)``, drawn from ``random.Random(seed).random()``
    (see ``RowIndex.shuffle``): the same rows in the same order on every interpreter."""
    rng = random.Random(seed)
    order = array("I", range(count))
    for i in range(count - 1, 0, -1):
        j = int(rng.random() * (i + 1))
        order[i], order[j] = order[j], order[i]
    return order


def _skip_rest_of_line(handle) -> None:
    while chunk := handle.readline(1 << 20):
        if chunk.endswith(b"\n"):
            break
