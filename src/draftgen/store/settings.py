"""What a run was made with: the ``meta`` table, its settings and identities checked on every
resume, and the marks it keeps (a simulated run, the generic profile's derived layout).
"""

from __future__ import annotations

import orjson

from draftgen.profiles import DERIVED_LAYOUT, DerivedLayout
from draftgen.store.identity import StoreError
from draftgen.store.schema import StorePart

# Meta: what answered a run made by a simulator ("built-in simulator"), whose data is synthetic.
# Set once and kept: a run resumed against a real server still holds the synthetic part.
SIMULATED = "simulated"


class Settings(StorePart):
    """``Store.settings``: the run's settings, identities and marks (the ``meta`` table)."""

    def check_settings(self, settings: dict) -> None:
        """Record the generation settings, or refuse if the store was made with others."""
        row = self.db.execute("SELECT value FROM meta WHERE name = 'settings'").fetchone()
        if row is None:
            self.db.execute(
                "INSERT INTO meta (name, value) VALUES ('settings', ?)",
                (orjson.dumps(settings, option=orjson.OPT_SORT_KEYS).decode(),),
            )
            return
        stored = orjson.loads(row[0])
        changed = [
            (f"{name} not set" if stored.get(name) is None else f"{name}={stored[name]!r}")
            + (" (now not set)" if settings.get(name) is None else f" (now {settings[name]!r})")
            for name in sorted(set(stored) | set(settings))
            if stored.get(name) != settings.get(name)
        ]
        if changed and self.holds_nothing():
            # A run that stopped before storing anything (an endpoint it could not reach) bought
            # nothing with its settings: the next one may choose others.
            self.db.execute(
                "UPDATE meta SET value = ? WHERE name = 'settings'",
                (orjson.dumps(settings, option=orjson.OPT_SORT_KEYS).decode(),),
            )
            return
        if changed:
            raise StoreError(
                f"{self.run_dir} was generated with other settings: {', '.join(changed)}; "
                "rerun with the stored settings to resume, or choose a new --out directory"
            )

    def holds_nothing(self) -> bool:
        """Whether nothing was generated here yet: no completion, failure or batch."""
        return not any(
            self.db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone()
            for table in ("completions", "failures", "batch_intents", "replaced_completions")
        )

    def check_identity(self, name: str, value: str, what: str) -> None:
        """Record ``value`` under meta ``name``, or refuse if the store has another one.

        A store from before ``name`` was recorded takes the value it is resumed with.
        """
        stored = self.meta(name)
        if stored is None:
            self.set_meta(name, value)
        elif stored != value:
            raise StoreError(
                f"{self.run_dir} was generated with another {what} ({name} {stored[:12]}, now "
                f"{value[:12]}); resume with the {what} it was made with, or choose a new --out "
                "directory"
            )

    def meta(self, name: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def set_meta(self, name: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value))

    def mark_simulated(self, source: str = "built-in simulator") -> None:
        """Record that a simulator (``source``) answers this run: its data is synthetic."""
        if self.meta(SIMULATED) is None:
            self.set_meta(SIMULATED, source)

    def simulated(self) -> str | None:
        """What simulator answered this run, or None for real data: the built-in one
        (``mark_simulated``), or a ``draftgen simulate`` server the probe found answering (its
        key says so: meta ``sources``)."""
        marked = self.meta(SIMULATED)
        if marked:
            return marked
        raw = self.meta("sources")
        for source in orjson.loads(raw) if raw else ():
            if isinstance(source, dict) and source.get("server") == "simulator":
                return f"draftgen simulator at {source.get('endpoint')}"
        return None

    def derived_layout(self) -> list[str]:
        """What the generic profile derived from the chat template, a line per item ([]: the
        run's profile is a family's own)."""
        stored = self.meta(DERIVED_LAYOUT)
        return DerivedLayout.from_json(orjson.loads(stored)).describe() if stored else []

    def all_meta(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT name, value FROM meta"))
