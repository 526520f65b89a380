"""The report of a chaos run: one summary line set, a JSON document and an HTML page with a
plot of the kills and checkpoints over time (``<scratch>/chaos-report.json`` and ``.html``)."""

from __future__ import annotations

import base64
import html
import io
import json
from collections import Counter
from pathlib import Path

from barrierflow.chaos.runner import ChaosResult

REPORT_JSON = "chaos-report.json"
#: The steps of an upgrade kills are counted under (upgrade mode), in the order they happen.
UPGRADE_STEPS = ("start", "rewrite", "canary", "commit", "rollback")
REPORT_HTML = "chaos-report.html"


def _count(n: int | None) -> str:
    return "-" if n is None else str(n)


def _step_order(step: str) -> tuple[int, str]:
    return (UPGRADE_STEPS.index(step) if step in UPGRADE_STEPS else len(UPGRADE_STEPS), step)


def summary_lines(result: ChaosResult) -> list[str]:
    """What ``barrierflow chaos`` prints: the verdict first, then the figures. The kills line
    counts the kills that landed, by kind, every kind the options could make included (0 when
    none landed); a second line gives the kinds as picked when a pick landed as another kind."""
    kinds = sorted({*result.kill_kinds, *result.kills})
    kills = ", ".join(f"{kind} {result.kills[kind]}" for kind in kinds) or "none"
    lines = [f"chaos {'PASSED' if result.passed else 'FAILED'}: pipeline {result.pipeline}, seed {result.seed}, "
             f"mode {result.mode}",
             f"  kills landed: {sum(result.kills.values())} of {result.kills_asked} asked ({kills}); runs "
             f"{result.runs} ({result.restarts} restarts); checkpoints completed {result.checkpoints}"]
    if result.picked and +result.picked != +result.kills:
        picked = ", ".join(f"{kind} {n}" for kind, n in sorted(result.picked.items()))
        lines.append(f"  kills picked: {picked} (a JVM kill before the run had a JVM landed as a group kill)")
    if result.upgrade_to is not None:
        outcomes = Counter(u.get("outcome", "unfinished") for u in result.upgrades)
        steps = ", ".join(f"{step} {result.steps[step]}" for step in
                          sorted({*UPGRADE_STEPS, *result.steps}, key=_step_order))
        points = ", ".join(f"{p} {n}" for p, n in sorted(result.points.items())) or "none"
        lines += [f"  upgrades to {result.upgrade_to} and back: {len(result.upgrades)} "
                  f"({', '.join(f'{o} {n}' for o, n in sorted(outcomes.items())) or 'none'})",
                  f"  kills by step: {steps}; armed points: {points}"]
    lines += [f"  rows: expected {sum(o.rows_expected for o in result.outputs)}, "
              f"committed {sum(o.rows for o in result.outputs)}; missing {result.missing}, extra {result.extra}, "
              f"duplicated {result.duplicated}",
              f"  dead letters: expected {_count(result.dead_letters_expected)}, written "
              f"{_count(result.dead_letters)}"
              + ("" if result.dead_letters == result.dead_letters_expected else " (they differ)"),
              f"  time: reference {result.reference_seconds:.1f} s, under kills {result.seconds:.1f} s"]
    formats = result.by_format()
    if len(formats) > 1 or any("commits" in sums for sums in formats.values()):
        for kind, sums in sorted(formats.items()):
            lines.append(f"  {kind}: {sums['outputs']} output(s), {sums['rows']} rows of {sums['rows_expected']}; "
                         f"missing {sums['missing']}, extra {sums['extra']}, duplicated {sums['duplicated']}"
                         + (f"; table commits {sums['commits']}, checkpoints committed more than once "
                            f"{sums['commits_repeated']}" if "commits" in sums else ""))
    for output in result.outputs:
        history = ("" if output.commits is None else
                   f"; table commits {output.commits}, checkpoints committed more than once "
                   f"{len(output.commits_repeated)}")
        lines.append(f"  output {output.stage}/{output.sink} ({output.kind} {output.chaos_target}): "
                     f"{output.rows} rows of {output.rows_expected}; missing {output.missing}, extra {output.extra}, "
                     f"duplicated {output.duplicated}{history}")
        for name, rows in output.examples.items():
            lines.append(f"    {name}, e.g. {rows[0]}")
        if output.commits_repeated:
            repeated = ", ".join(f"checkpoint {cid}: {n} commits" for cid, n in
                                 list(output.commits_repeated.items())[:5])
            lines.append(f"    committed more than once, e.g. {repeated}")
    if result.problem:
        lines.append(f"  problem: {result.problem}")
    return lines


def _plot(result: ChaosResult) -> str:
    """The timeline as a base64 PNG: checkpoints as dots, kills as lines coloured by kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"kill": "tab:red", "point": "tab:orange", "start": "tab:gray"}
    figure, axis = plt.subplots(figsize=(10, 2.8))
    axis.scatter(result.checkpoint_times, [1] * len(result.checkpoint_times), marker="|", s=300,
                 color="tab:green", label=f"checkpoint completed ({result.checkpoints})")
    for kind, label in (("kill", "SIGKILL"), ("point", "crash at a protocol point"), ("start", "run started")):
        times = [e.at for e in result.events if e.kind == kind]
        for at in times:
            axis.axvline(at, color=colours[kind], alpha=0.8 if kind != "start" else 0.25,
                         linestyle="-" if kind != "start" else ":")
        if times:
            axis.plot([], [], color=colours[kind], label=f"{label} ({len(times)})")
    axis.set_yticks([])
    axis.set_xlabel("seconds since the first run under kills")
    axis.set_title(f"chaos on {result.pipeline}: {'passed' if result.passed else 'FAILED'}")
    axis.legend(loc="upper left", fontsize="small", ncol=2)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def write_report(result: ChaosResult, directory: Path) -> tuple[Path, Path]:
    """Write the JSON document and the HTML page into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    document = result.as_dict()
    json_path, html_path = directory / REPORT_JSON, directory / REPORT_HTML
    json_path.write_text(json.dumps(document, indent=2, default=str), encoding="utf-8")
    rows = "".join(f"<tr><td>{html.escape(o.stage)}/{html.escape(o.sink)}</td><td>{o.kind}</td>"
                   f"<td>{o.rows_expected}</td><td>{o.rows}</td><td>{o.missing}</td><td>{o.extra}</td>"
                   f"<td>{o.duplicated}</td><td>{'-' if o.commits is None else o.commits}</td>"
                   f"<td>{'-' if o.commits is None else len(o.commits_repeated)}</td></tr>" for o in result.outputs)
    lines = "\n".join(html.escape(line) for line in summary_lines(result))
    html_path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>chaos {html.escape(result.pipeline)}</title></head><body>"
        f"<h1>barrierflow chaos: {html.escape(result.pipeline)} "
        f"{'passed' if result.passed else 'FAILED'}</h1><pre>{lines}</pre>"
        f"<img alt='kills and checkpoints over time' src='data:image/png;base64,{_plot(result)}'>"
        f"<p>dead letters: expected {_count(result.dead_letters_expected)}, written {_count(result.dead_letters)}</p>"
        "<table border='1'><tr><th>output</th><th>kind</th><th>expected</th><th>committed</th><th>missing</th>"
        "<th>extra</th><th>duplicated</th><th>table commits</th><th>checkpoints committed more than once</th></tr>"
        f"{rows}</table>"
        f"<p>JSON: {html.escape(str(json_path))}</p></body></html>", encoding="utf-8")
    return json_path, html_path
