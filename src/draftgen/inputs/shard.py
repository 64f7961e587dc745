"""Shards: a deterministic split of a suite's rows, so N machines can each run one part.

A row belongs to shard I of N when a stable hash of its prompt-level key is I modulo N, so every
turn and sample of a conversation (and every row sharing that prompt) lands together; rejected
rows, which have no key, are placed by their file name and line.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from draftgen.errors import DraftgenError

ALL = "all"  # the shard label of a run that read every row


class ShardError(DraftgenError, ValueError):
    """A shard that cannot be used as given; the message says what to write instead."""


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ShardError(
                f"--shard {self.index}/{self.count} is out of range; use I/N with 0 <= I < N"
            )

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    def holds_key(self, key: str) -> bool:
        """Whether the row whose first turn has plan key ``key`` is this shard's."""
        return stable_bucket(key.encode(), self.count) == self.index

    def holds_line(self, source: str, line: int) -> bool:
        """Whether the rejected row at ``line`` of ``source`` is this shard's (by file name, so
        machines that keep the inputs under different directories agree)."""
        name = os.path.basename(source)
        return stable_bucket(f"{name}\0{line}".encode(), self.count) == self.index


def stable_bucket(data: bytes, count: int) -> int:
    """``data`` hashed into one of ``count`` buckets, the same on every machine and Python run."""
    digest = hashlib.blake2b(data, digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def parse_shard(text: str) -> Shard:
    """``I/N`` as a Shard; ShardError (one sentence naming --shard) if it is not that."""
    index, slash, count = text.strip().partition("/")
    if not slash or not index.isdigit() or not count.isdigit():
        raise ShardError(f"--shard {text!r} is not I/N, e.g. 0/4 for the first of four shards")
    return Shard(int(index), int(count))


def shard_label(shard: Shard | None) -> str:
    """What a run's meta records: ``I/N``, or ``all`` for an unsharded run."""
    return shard.label if shard is not None else ALL
