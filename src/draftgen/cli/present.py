"""What the commands print: a run's status, a folder of runs, an estimate, a merge, a draft
vocabulary, as text and as JSON. The library returns data; only this module words it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from draftgen.redact import printable, printable_json, usd


def as_json(data: object) -> str:
    """``--json``: the data as the library returns it, indented."""
    return printable_json(data, indent=True)


def format_merge(summary) -> str:
    """``merge_runs``'s summary in one line (the merged run's status follows it)."""
    return (
        f"merged {summary.runs} runs into {summary.out} in {summary.seconds:.2f} s: "
        f"{summary.completions} completions, {summary.failures} failures, {summary.rejected} "
        f"rejected rows; {summary.shared_keys} keys were in more than one run (kept once); "
        f"shard {summary.shard}"
    )


def format_vocab(mapping, paths: list[Path], size: int, tokenizer: str | None, sized: bool) -> str:
    """``RunDir.vocab``'s result; ``sized``: the target vocabulary size was given."""
    lines = _vocab_lines(mapping, size, None if sized else tokenizer)
    lines.append("wrote " + ", ".join(str(path) for path in paths))
    return "\n".join(lines)


def _vocab_lines(mapping, size: int, tokenizer: str | None) -> list[str]:
    """The draft vocabulary's coverage; with ``tokenizer``, the target size taken from it first
    (the model's own vocab_size may be larger)."""
    lines = []
    if tokenizer is not None:
        lines.append(
            f"target vocabulary: {size} ids (the tokenizer {tokenizer}); pass "
            "--vocab-size if the model's config.json says otherwise"
        )
    lines.append(
        f"draft vocabulary of {len(mapping.used_ids)} ids covers {mapping.coverage:.2%} of "
        f"{mapping.supervised_tokens} generated tokens in {mapping.samples} samples"
    )
    return lines


def format_export(summary, out: Path, tokenizer: str | None) -> str:
    """``RunDir.write_export``'s result: the rows written, and the speculators format's draft
    vocabulary (``tokenizer``: the run's, when the target size was taken from it)."""
    lines = []
    if summary.vocab is not None:
        lines += _vocab_lines(summary.vocab, summary.target_vocab_size, tokenizer)
    beside = f" (with {', '.join(path.name for path in summary.files)})" if summary.files else ""
    lines.append(f"wrote {summary.rows} rows to {out}{beside}")
    return "\n".join(lines)


def export_warnings(summary, max_length: int | None) -> list[str]:
    """What a trainer would change in the export: rows longer than the trainers' windows (when
    any is, or ``--max-length`` was given) and the format's own caveat."""
    warnings = []
    lengths = summary.lengths
    common = lengths.common if lengths is not None else ()
    if lengths is not None and (lengths.over[common[0]] or max_length):
        limits = " / ".join(map(str, common))
        counts = " / ".join(str(lengths.over[limit]) for limit in common)
        text = (
            f"rows longer than {limits} ids: {counts} of {lengths.rows} (the longest has "
            f"{lengths.longest} ids)"
        )
        if max_length:
            text += f"; longer than --max-length {max_length}: {lengths.over[max_length]}"
        if lengths.over[common[0]]:
            text += f". {lengths.trainers}"
        warnings.append(text)
    if summary.caveat:
        warnings.append(summary.caveat)
    return warnings


def say_snapshot(snapshot, run_dir: Path) -> None:
    """What a read of a run directory left out (a run is active) or did first (reconstructed)."""
    if snapshot.active_run is not None:
        print(
            f"draftgen: a run is active in {run_dir} (draftgen {snapshot.active_run}): this is a "
            f"snapshot of the samples reconstructed so far; {snapshot.left_out} "
            "completions stored but not yet reconstructed are left out, so run it again "
            "once the run has finished",
            file=sys.stderr,
        )
    elif snapshot.reconstructed:
        print(
            f"reconstructed {snapshot.reconstructed} samples the run had not reached (it was "
            "interrupted)"
        )


def format_run_list(listed: dict[str, dict], folder: Path) -> str:
    """The runs of a folder, a line each: samples, verified, failures, cost, and whether one is
    active."""
    lines = [f"{folder} holds {len(listed)} draftgen run{'s' if len(listed) != 1 else ''}:"]
    width = max(len(path) for path in listed)
    for path, counts in listed.items():
        failures = sum((counts.get("failures") or {}).values())
        share = f" ({counts['verified'] / counts['samples']:.1%})" if counts["samples"] else ""
        active = "  (active)" if counts.get("active_run") else ""
        lines.append(
            f"  {path:<{width}}  {counts['completions']} completions, {counts['samples']} "
            f"samples, verified {counts['verified']}{share}, {failures} failures, "
            f"{usd(counts['cost'])}{active}"
        )
    lines.append("draftgen status RUN_DIR shows one of them in full")
    return "\n".join(lines)


def format_status(counts: dict, run_dir: Path) -> str:
    from draftgen.api import REJECTED_NAME

    share = f" ({counts['verified'] / counts['samples']:.1%})" if counts["samples"] else ""
    lines = [
        f"run {run_dir}",
        f"  rows rejected       {counts.get('rejected', 0)}"
        + (f"  (reasons in {run_dir / REJECTED_NAME})" if counts.get("rejected") else ""),
        f"  completions stored  {counts['completions']}  (tokens {counts['prompt_tokens']} "
        f"prompt + {counts['completion_tokens']} completion)",
        cost_line(counts),
        *per_verified_line(counts),
        retried_line(counts),
        f"  samples             {counts['samples']}  verified {counts['verified']}{share}, "
        f"truncated {counts['truncated']}, not yet reconstructed {counts['unreconstructed']}",
    ]
    lines.extend(format_unproven(counts.get("unproven")))
    for title, table in (
        ("verification", counts["reasons"]),
        ("finish reasons", counts["finish_reasons"]),
        ("final failures", counts["failures"]),
    ):
        lines.append(f"  {title}:" + ("" if table else " none"))
        # Finish reasons and failure reasons are the servers' words: printed defused.
        lines.extend(f"    {printable(name):<28} {count}" for name, count in table.items())
    rejected = counts.get("rejected_reasons") or {}
    lines.append("  rejected rows:" + ("" if rejected else " none"))
    lines.extend(f"    {count:>6}  {printable(kind)}" for kind, count in rejected.items())
    if counts.get("active_run"):
        lines.insert(
            1,
            f"  run active          draftgen {counts['active_run']} is working on this directory: "
            "these counts are a snapshot",
        )
    if counts.get("simulated"):
        lines.insert(1, f"  simulated           yes ({counts['simulated']}): the data is synthetic")
    if counts.get("derived_layout"):
        lines.append("  profile             generic: layout derived from the chat template")
        lines.extend(f"    {printable(line)}" for line in counts["derived_layout"])
    lines.extend(format_provider_figures(counts.get("providers")))
    lines.extend(format_calibration(counts.get("calibration")))
    lines.extend(format_left_out(counts.get("excluded_providers"), counts.get("rebuys")))
    lines.extend(format_exactness(counts.get("exactness") or {}, counts.get("proofs")))
    lines.extend(format_endpoints(counts.get("endpoints") or {}))
    lines.extend(format_batches(counts.get("batches") or {}))
    return "\n".join(lines)


def cost_line(counts: dict) -> str:
    """What the run cost: what the API charged where it says (a batch's ``usage.cost``, rows it
    billed and never returned included), else the stored completions' own cost."""
    batches = counts.get("batches") or {}
    text = f"  cost                {usd(counts['cost'])}"
    if not batches.get("final"):
        return text
    if batches.get("charged") is None:
        return text + "  (the stored rows' cost: the batch API reports none)"
    unreturned = (batches.get("timing") or {}).get("billed_without_rows") or 0.0
    return text + (
        f"  (as the batch API charged it, {usd(unreturned)} of it for rows that never came back)"
        if unreturned > 1e-9
        else "  (as the batch API charged it)"
    )


def retried_line(counts: dict) -> str:
    """Failed attempts that were sent again, by kind: the count the live progress shows too."""
    retried = counts.get("retried_errors") or {}
    kinds = ", ".join(f"{printable(kind)} {count}" for kind, count in retried.items())
    total = counts.get("retried_attempts", sum(retried.values()))
    return f"  retried attempts    {total}" + (f"  ({kinds})" if kinds else "")


def per_verified_line(counts: dict) -> list[str]:
    """The run's headline: what one verified sample cost (none from a store before it)."""
    if "cost_per_verified" not in counts:
        return []
    price = counts["cost_per_verified"]
    return [
        f"  $ per verified      {usd(price)}"
        + (
            f"  (cost over {counts['verified']} verified samples)"
            if price is not None
            else "  (no sample verified yet)"
        )
    ]


TOP_REASONS = 3  # failure reasons a provider's status line names


def format_provider_figures(providers: dict | None) -> list[str]:
    """Per provider: samples, the share verified, cost, dollars per verified sample and why the
    rest failed (``Store.providers.provider_figures``)."""
    if providers is None:
        return []  # counts from before providers were figured
    lines = ["  providers:" + ("" if providers else " none")]
    names = {name: printable(name) for name in providers}
    width = max((len(shown) for shown in names.values()), default=0)
    for name, row in providers.items():
        share = f" ({row['verified'] / row['samples']:.1%})" if row["samples"] else ""
        failed = list(row["unverified"].items())
        reasons = ", ".join(f"{printable(r)} {n}" for r, n in failed[:TOP_REASONS])
        if len(failed) > TOP_REASONS:
            reasons += f", {len(failed) - TOP_REASONS} more reasons"
        lines.append(
            f"    {names[name]:<{width}}  samples {row['samples']}  verified {row['verified']}"
            f"{share}  cost {usd(row['cost'])}  $ per verified {usd(row['cost_per_verified'])}"
            + (f"  truncated {row['truncated']}" if row["truncated"] else "")
            + (f"  failed: {reasons}" if reasons else "")
        )
    return lines


def format_unproven(unproven: dict | None) -> list[str]:
    """Yield lost to doubt: samples that may be exact but that the proof could not settle."""
    if not unproven or not unproven["samples"]:
        return []
    reasons = ", ".join(f"{printable(r)} {n}" for r, n in unproven["by_reason"].items())
    return [
        f"  unproven            {unproven['samples']} samples ({unproven['share']:.1%}) the "
        f"proof could not settle: {reasons}"
    ]


CALIBRATION_QUESTIONS = {"renderer": "renderer", "tool_arguments": "tool arguments"}


def format_calibration(calibration: dict | None) -> list[str]:
    """What calibration asked each provider, what the answer proved and what it cost."""
    if not calibration:
        return []
    lines = ["  calibration:"]
    for provider, questions in calibration.items():
        cost = sum(max(row.get("cost") or 0.0, 0.0) for row in questions.values())
        lines.append(f"    {printable(provider) or '(the endpoint)'}  cost {usd(cost)}")
        lines.extend(
            f"      {CALIBRATION_QUESTIONS.get(question, question)}: "
            f"{printable(row['verdict'])}: {printable(row.get('detail') or '')}"
            for question, row in questions.items()
        )
    return lines


def format_left_out(excluded: dict | None, rebuys: dict | None) -> list[str]:
    """The providers the run left out, with the evidence, and what buying their spoiled samples
    again came to (docs/providers.md)."""
    lines = []
    if excluded:
        lines.append("  left out:")
        lines.extend(
            f"    {printable(name)}: {printable(entry['evidence'])}"
            for name, entry in excluded.items()
        )
    if rebuys:
        lines.append(
            f"  bought again        {rebuys['rebought']} spoiled samples for "
            f"{usd(rebuys['rebuy_cost'])} (the spoiled ones cost {usd(rebuys['spoiled_cost'])}, "
            "counted in the cost above)"
        )
    return lines


def format_batches(batches: dict) -> list[str]:
    """Batches of run --batch: those in flight, the final ones, and what the API charged."""
    if not batches:
        return []  # a live run
    final = ", ".join(f"{count} {printable(status)}" for status, count in batches["final"].items())
    lines = [
        f"  batches:  {len(batches['in_flight'])} in flight ({batches['rows_in_flight']} rows), "
        f"{sum(batches['final'].values())} final" + (f" ({final})" if final else ""),
        f"    rows sent {batches['rows_sent']}, answered {batches['rows_answered']}, sent again "
        f"after a failed, expired or cancelled batch {batches['rows_sent_again']}",
    ]
    from draftgen.api import timing_text

    timing = timing_text(batches.get("timing") or {})
    if timing:
        lines.append(f"    timing: {timing}")
    charged = batches.get("charged")
    unreturned = (batches.get("timing") or {}).get("billed_without_rows") or 0.0
    if charged is not None:
        lines.append(
            f"    charged by the API {usd(charged)} (batch usage.cost); rows stored "
            f"{usd(batches['rows_cost'])}"
            + (f"; {usd(unreturned)} billed for rows that never came back" if unreturned else "")
        )
    elif batches["final"]:
        lines.append("    charged: the batch API reports no batch cost: see the tokens")
    else:
        lines.append("    charged: nothing yet (no batch has ended)")
    for batch in batches["in_flight"]:
        name = batch["batch_id"] or f"intent {batch['nonce']} (create unconfirmed)"
        status = batch["status"] or ("not yet seen" if batch["batch_id"] else "reconciling")
        lines.append(f"    {printable(name)}: {printable(status)}, {batch['rows']} rows")
    if batches["in_flight"]:
        lines.append(
            "    the same run command (or run --batch-detach) stores their results; draftgen "
            "cancel RUN_DIR cancels them"
        )
    return lines


def format_endpoints(endpoints: dict) -> list[str]:
    """Per endpoint: attempts, completions, failed attempts by kind, ejections, latency, tokens."""
    if not endpoints:
        return []  # a store from before endpoints were recorded
    lines = ["  endpoints:"]
    for url, row in endpoints.items():
        kinds = ", ".join(
            f"{printable(kind)} {count}" for kind, count in row["error_kinds"].items()
        )
        latency = row["latency_mean"]
        state = []
        if row["ejections"]:
            state.append(f"ejected {row['ejections']}x, readmitted {row['readmissions']}x")
        if row["removed"]:
            state.append("removed (misconfigured)")
        lines.append(f"    {printable(url)}" + (f"  [{'; '.join(state)}]" if state else ""))
        errors = f"errors {row['errors']}" + (f" ({kinds})" if kinds else "")
        seconds = f"{latency:.3f} s" if latency is not None else "-"
        lines.append(
            f"      requests {row['requests']}  completions {row['completions']}  {errors}  "
            f"latency {seconds}  tokens {row['prompt_tokens']} prompt + "
            f"{row['completion_tokens']} completion"
        )
    return lines


def format_exactness(exactness: dict, proofs: dict | None = None) -> list[str]:
    """What proves the ids, how many are proven, and how far the text proof can be trusted."""
    sources = proofs or exactness.get("id_sources") or {}
    found = {name: row for name, row in sources.items() if row["samples"]}
    lines = ["  proofs:" + ("" if found else " none")]
    for source, row in found.items():
        share = row["verified"] / row["samples"] if row["samples"] else 0.0
        lines.append(
            f"    {printable(source):<9} {row['samples']:>7}  verified {row['verified']} "
            f"({share:.1%})"
        )
        if "resplits" in row:
            lines.extend(format_resplits(row["resplits"]))
    checks = exactness.get("text_checks") or {}
    if checks:
        agreement = exactness.get("text_agreement") or 0.0
        lines.append(
            f"    text path agrees with server ids in {agreement:.1%} of "
            f"{sum(checks.values())} samples:"
        )
        lines.extend(f"      {name:<26} {count}" for name, count in checks.items())
    return lines


def format_resplits(resplits: dict) -> list[str]:
    """The text proof's hidden re-splits (``draftgen.reconstruct.resplits.estimate``)."""
    if not resplits.get("samples"):
        return []
    changed = f"{resplits['count_changed']} of {resplits['samples']} answers' counts differ"
    if resplits.get("estimated_wrong") is None and resplits.get("basis") is None:
        return [
            "      re-splits that keep the count: not measured yet (draftgen report measures "
            f"them); {changed}"
        ]
    if resplits.get("estimated_wrong") is None:
        alone = resplits["pairs"]["alone"]
        return [
            "      re-splits that keep the count: cannot be estimated with this tokenizer (only "
            f"{alone:.0%} of the run's tokens re-encode alone to themselves: it encodes a piece "
            f"by its place); {changed}"
        ]
    if resplits["basis"] == "server_ids":
        checked = resplits["checked"]
        basis = (
            f"the server's ids: {checked['ids_differ']} proven by text with other ids, "
            f"{checked['count_changed']} counts differ"
        )
    else:
        pairs = resplits["pairs"]
        basis = (
            f"{pairs['kept']:,} of {pairs['resplit']:,} re-splitting pairs of this run's tokens, "
            f"{pairs['drawn']:,} drawn"
        )
    wrong_share = resplits.get("estimated_wrong_share") or 0.0
    return [
        f"      re-splits that keep the count (a count cannot see them): an estimated "
        f"{resplits['estimated_wrong']:g} verified samples ({wrong_share:.1%}) hold other ids",
        f"      basis: {changed}; {resplits['keeps_count']:.1%} of re-splits keep the count "
        f"({basis}); {resplits['resplit_share']:.1%} of answers re-split",
    ]


def format_estimate(result) -> str:
    """``Run.estimate``'s result as ``draftgen estimate`` prints it."""
    lines = [
        f"rows {result.rows} ({result.rejected} rejected), turns {result.turns}, "
        f"requests {result.requests}",
        f"  prompt tokens      {result.prompt_tokens}",
    ]
    if result.output_high is not None:
        lines.append(
            f"  completion tokens  {result.output_low}..{result.output_high} "
            f"(from {result.output_source})"
        )
    else:
        lines.append("  completion tokens  unknown")
    if result.price_in is not None:
        lines.append(
            f"  price              ${result.price_in * 1e6:.4g} / ${result.price_out * 1e6:.4g} "
            f"per million prompt / completion tokens (from {result.price_source})"
        )
    if result.batch_price_in is not None:
        lines.append(
            f"  batch price        ${result.batch_price_in * 1e6:.4g} / "
            f"${result.batch_price_out * 1e6:.4g} per million (the :batch entry, "
            f"from {result.batch_price_source})"
        )
    if result.cost_low is not None:
        high = f"${result.cost_high:.2f}" if result.cost_high is not None else "unknown"
        lines.append(f"  cost               ${result.cost_low:.2f} .. {high}")
    if result.batch_cost_low is not None:
        high = f"${result.batch_cost_high:.2f}" if result.batch_cost_high is not None else "?"
        lines.append(
            f"  cost with --batch  ${result.batch_cost_low:.2f} .. {high}, in "
            f"{result.batch_rounds} batch round{'s' if result.batch_rounds != 1 else ''} (a "
            "conversation advances one turn per round; each round takes the batch's own time)"
        )
    if result.seconds_high is not None:
        lines.append(
            f"  time               {_duration(result.seconds_low)} .. "
            f"{_duration(result.seconds_high)} at {result.concurrency} in flight, "
            f"{result.tokens_per_second:.1f} tokens/s each"
            + (
                f", retries and backoff included ({result.retries_per_request:.2f} retries a "
                f"request in the pilot: +{_duration(result.retry_seconds_low)} .. "
                f"{_duration(result.retry_seconds_high)})"
                if result.retries_per_request
                else ""
            )
        )
    if result.pilot:
        lines.append(
            f"  pilot              {result.pilot['completions']} completions, mean "
            f"{result.pilot['mean_completion_tokens']:.0f} tokens, cost "
            f"${result.pilot['cost']:.4f}"
        )
    lines.extend(_estimate_providers(result.providers))
    lines.extend(f"  note: {note}" for note in result.notes)
    return "\n".join(lines)


def _estimate_providers(providers: list[dict]) -> list[str]:
    """A line per listed provider, cheapest first: its price, the run's cost at it, whether the
    routing lets it serve, and what the pilot's samples of it proved."""
    if not providers:
        return []
    lines = [f"  providers          {len(providers)} listed (draftgen providers MODEL --probe N)"]
    width = max(len(printable(p["provider"])) for p in providers)

    def price(p: dict) -> float:
        return p["cost_high"] if p["cost_high"] is not None else p["cost_low"] or float("inf")

    for p in sorted(providers, key=price):
        text = f"    {printable(p['provider']):<{width}}"
        if p["price_in"] is not None and p["price_out"] is not None:
            text += f"  ${p['price_in'] * 1e6:.4g} / ${p['price_out'] * 1e6:.4g} per M"
        if p["cost_low"] is not None:
            high = f"${p['cost_high']:.2f}" if p["cost_high"] is not None else "?"
            text += f"  cost ${p['cost_low']:.2f} .. {high}"
        if p["quantization"]:
            text += f"  {printable(p['quantization'])}"
        if pilot := p["pilot"]:
            per = pilot["cost_per_verified"]
            text += (
                f"  pilot: {pilot['verified']} of {pilot['samples']} verified, $ per verified "
                + (usd(per) if per is not None else "-")
            )
        if not p["routed"]:
            text += "  (left out by [openrouter.provider])"
        lines.append(text)
    return lines


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def format_sample(sample: dict) -> str:
    """``draftgen show``: the verdict, then the prompt's and the answer's tokens, each token's
    text between ``|`` (whitespace and control characters spelled out, so every boundary shows)."""
    verdict = "verified" if sample["verified"] else "unverified"
    prompt_len = sample["prompt_len"]
    lines = [
        f"sample {printable(sample['id'])} (key {printable(sample['key'])})",
        f"  {verdict}: {printable(sample['verify_reason'])}"
        + (f" ({printable(sample['detail'])})" if sample.get("detail") else ""),
        f"  provider {printable(str(sample['provider']))}, generation "
        f"{printable(str(sample['generation_id']))}, finish "
        f"{printable(str(sample['finish_reason']))}, proof {printable(sample['id_source'])}",
        f"  prompt {prompt_len} tokens, answer {len(sample['input_ids']) - prompt_len} tokens "
        "(the answer is what the loss mask trains on)",
        "  prompt:",
        "    " + _token_text(sample["tokens"][:prompt_len]),
        "  answer:",
        "    " + _token_text(sample["tokens"][prompt_len:]),
    ]
    return "\n".join(lines)


def _token_text(tokens: list[str]) -> str:
    return "|" + "|".join(printable(token) for token in tokens) + "|"


# -- draftgen providers --------------------------------------------------------------------------


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell; every cell already printable."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def _shown(value: object) -> str:
    """A listed value as printed: "?" for one the listing left out or got wrong."""
    return "?" if value is None else printable(value)


def endpoint_status(status: int | str | None) -> str:
    """A listed endpoint's status in words: OpenRouter's number is 0 when the endpoint is up and
    below 0 when it is degraded (a bare 0 read as an error count or an HTTP status)."""
    if isinstance(status, int):
        return "up" if status >= 0 else f"degraded ({status})"
    return _shown(status)


def _per_million(price: float | None) -> str:
    return "?" if price is None else f"${price * 1e6:.4g}"


def format_providers(endpoints: list[dict], model: str) -> str:
    """``draftgen providers MODEL``: a line per provider (prices in USD per million tokens)."""
    if not endpoints:
        return f"{printable(model)}: the listing names no provider"
    rows = [
        [
            _shown(e["provider"] or e["name"]),
            _shown(e["tag"]),
            f"{_per_million(e['prompt_price'])}/{_per_million(e['completion_price'])}",
            _shown(e["quantization"]),
            _shown(e["context_length"]),
            endpoint_status(e["status"]),
        ]
        for e in endpoints
    ]
    header = ["provider", "tag", "price in/out per M", "quantization", "context", "status"]
    return "\n".join([f"{printable(model)}: {len(endpoints)} providers", *_table(header, rows)])


def _share(value: float | None) -> str:
    return "?" if value is None else f"{value:.0%}"


def _parity(mismatch_share: float | None) -> float | None:
    """Prompt parity: the share of samples whose prompt count matched draftgen's rendering."""
    return None if mismatch_share is None else 1 - mismatch_share


def format_probe(report: dict) -> str:
    """``draftgen providers MODEL --probe N``: a line per provider, best first, then the
    ``[openrouter.provider]`` block (``ProbeReport.as_dict``)."""
    rows = []
    for f in report["providers"]:
        price = f["dollars_per_verified"]
        latency = f["latency_p50"]
        rows.append(
            [
                printable(f["route"]),
                f["verdict"],
                str(f["samples"]),
                _share(f["verified_share"]),
                _share(_parity(f["prompt_mismatch_share"])),
                _share(f["whitespace_share"]),
                _share(f["tool_call_share"]),
                "?" if latency is None else f"{latency:.2f} s",
                f"${f['cost']:.4f}",
                "?" if price is None else f"${price:.6f}",
            ]
        )
    header = [
        "provider",
        "verdict",
        "samples",
        "verified",
        "prompt parity",
        "whitespace",
        "tool calls",
        "p50",
        "cost",
        "$/verified",
    ]
    lines = [
        f"{printable(report['model'])}: {len(rows)} providers probed, each answering every probe "
        f"turn {report['probes']} times",
        *_table(header, rows),
        "(whitespace, tool calls: share of samples whose whitespace or tool calls the provider "
        "altered or left unproven)",
    ]
    for f in report["providers"]:
        if f["error"]:
            lines.append(f"{printable(f['route'])}: not probed: {printable(f['error'])}")
        elif f["caught"]:
            lines.append(f"{printable(f['route'])}: caught: {', '.join(f['caught'])}")
        if f.get("calibration"):
            proved = ", ".join(f"{q} {v}" for q, v in f["calibration"].items())
            lines.append(f"{printable(f['route'])}: calibration: {printable(proved)}")
    if report["toml"] is None:
        lines += ["", "no provider verified 90% of its samples: no routing to recommend"]
    else:
        lines += ["", "use in draftgen.toml:", report["toml"]]
    return "\n".join(lines)
