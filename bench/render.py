"""Turn the benchmarks' JSON lines into the Markdown tables of bench/README.md.

Each section pairs a Switchboard figure with its anchor from the same run: the bare aiohttp
ceiling for ingest, PgQueuer and the bare MCP SDK floor for claims, the provider call for replies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ENGINE_LABEL = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "none": "-"}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None or value == "":
            return "-"
        if isinstance(value, float):
            return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.2f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    m = rows[-1]["machine"]
    return [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}, "
        f"SQLite {m['sqlite']}; run {m['date']} (1-minute load average at the end: {m['loadavg_1m']}).",
        *probe_line([r for r in rows if r["benchmark"] == "probe"]),
    ]


# ``bench.probe``'s figures, as the header names them.
PROBES = (
    ("python_us", "Python (orjson's read of a 15 KB payload, walked)"),
    ("socket_us", "40 KB over TCP on 127.0.0.1"),
    ("postgresql_us", "a PostgreSQL `SELECT 1`"),
)


def probe_line(probes: list[dict[str, Any]]) -> list[str]:
    """The machine's speed at each probe (``bench.probe``: the run's start and end), so that a run
    made in a slow phase shows it."""
    if not probes:
        return []
    labels = " → ".join(str(p["probe"]) for p in probes)
    parts = [
        f"{text} {' → '.join(f'{float(p[key]):g}' for p in probes)} µs"
        for key, text in PROBES
        if all(key in p for p in probes)
    ]
    return ["", f"Speed probes ({labels}; bench/probe.py): {'; '.join(parts)}."]


def _ingest_table(measured: list[dict[str, Any]]) -> str:
    """The ingest rows as a table, each Switchboard row's share of the bare rows of its own sender,
    senders, processes and round (``bench.ingest --rounds``; a column only then)."""
    rounds = any("round" in r for r in measured)

    def anchor(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r.get("round"), r.get("driver", "python"), r["senders"], r.get("processes", 1))

    ceiling = {anchor(r): r["per_second"] for r in measured if r.get("server") == "bare aiohttp"}
    floor = {anchor(r): r["per_second"] for r in measured if r.get("server") == "bare store"}

    def of_floor(r: dict[str, Any]) -> str | None:
        if r.get("server", "switchboard") != "switchboard" or r.get("engine") != "postgresql":
            return None
        top = floor.get(anchor(r))
        return f"{r['per_second'] / top:.2f}x" if top else None

    def share(r: dict[str, Any]) -> str | None:
        if r.get("server") == "bare aiohttp":
            return "ceiling"
        top = ceiling.get(anchor(r))
        return f"{r['per_second'] / top:.1%}" if top else None

    def server(r: dict[str, Any]) -> str:
        name = str(r.get("server", "switchboard"))
        return name if r.get("processes", 1) == 1 else f"{name}, {r['processes']} processes"

    return table(
        ["round"] * rounds
        + [
            "senders",
            "server",
            "engine",
            "rules",
            "sender",
            "acked",
            "deliveries/s",
            "of ceiling",
            "of bare store",
            "p50 ms",
            "p99 ms",
            "server CPU ms/request",
            "PostgreSQL CPU ms/request",
            "machine CPU ms/request",
            "machine busy",
            "other answers",
            "server peak RSS MiB",
        ],
        [
            [r.get("round")] * rounds
            + [
                r["senders"],
                server(r),
                ENGINE_LABEL[r["engine"]],
                r.get("rules", 0) if r.get("server", "switchboard") == "switchboard" else "-",
                r.get("driver", "python"),
                r["acked"],
                r["per_second"],
                share(r),
                of_floor(r),
                r.get("p50_ms"),
                r.get("p99_ms"),
                r.get("server_cpu_ms_per_request"),
                r.get("database_cpu_ms_per_request"),
                r.get("machine_cpu_ms_per_request"),
                f"{r['machine_busy_pct']}%" if r.get("machine_busy_pct") is not None else None,
                ", ".join(f"{s}: {n}" for s, n in (r.get("other_statuses") or {}).items()) or None,
                r["server_peak_rss_mib"],
            ]
            for r in sorted(
                measured,
                key=lambda r: (
                    r.get("round", 0),
                    r["senders"],
                    r.get("processes", 1),
                    r.get("server") != "bare aiohttp",
                    r.get("server") != "bare store",
                    r["engine"],
                    r.get("rules", 0),
                    r.get("driver", ""),
                ),
            )
        ],
    )


def ingest_section(rows: list[dict[str, Any]]) -> list[str]:
    measured = [r for r in rows if "senders" in r and "summary" not in r]
    if not measured:
        return []
    out = ["\n### Ingest: signed GitHub deliveries over HTTP\n"]
    single = [r for r in measured if "round" not in r]
    if single:
        out.append(_ingest_table(single))
    # ``bench.ingest --rounds``: a table of its own, every row compared with its own round's anchors.
    rounds = [r for r in measured if "round" in r]
    if rounds:
        out.append(
            "\nIn alternating rounds (`bench.ingest --rounds`), each row against its own round's anchors:\n"
        )
        out.append(_ingest_table(rounds))
    out.append(
        '\n"of ceiling": deliveries/s over the bare aiohttp handler\'s req/s with the same sender, '
        "senders and number of processes (2 processes: of one database, the senders spread evenly "
        "over them). The bare rows under each sender show how far that sender itself goes. "
        '"of bare store": a Switchboard row on PostgreSQL over the bare store row (signature, JSON '
        "and group commit only; bench/bare_store.py) of the same sender, senders and processes. "
        '"rules": the webhook\'s routing rules (10: every delivery evaluated by all ten, '
        "bench/ingest.py's RULES). "
        '"server CPU": the server process and its rule workers; "PostgreSQL CPU": every local '
        'postgres process over the same interval; "machine CPU": every process on the machine and '
        'the kernel, sender included; "machine busy": the share of all its cores that was busy '
        "(what is idle is all a faster server could still take)."
    )
    for r in rows:
        if r.get("summary"):
            processes = "" if r.get("processes", 1) == 1 else f", {r['processes']} processes"
            shares = ", ".join(f"{pct}%" for pct in r["shares_pct"])
            out.append(
                f"\n{ENGINE_LABEL[r['engine']]}{processes}, {r.get('rules', 0)} rules, {r['senders']} "
                f"senders ({r['driver']}), of its own round's ceiling: {shares}; median "
                f"**{r['median_share_pct']}%**."
            )
        if "check" in r:
            processes = "" if r.get("processes", 1) == 1 else f", {r['processes']} processes"
            if "round" in r:
                processes += f", round {r['round']}"
            what = (
                f"{r['server']} on {ENGINE_LABEL[r['engine']]}"
                if r.get("server")
                else f"{ENGINE_LABEL[r['engine']]}, {r.get('rules', 0)} rules"
            )
            line = (
                f"\n{what}{processes}: "
                f"{r['acknowledged']} acknowledged todos, "
                f"{r.get('acknowledged_not_stored', 0)} of them not stored; {r['stored']} stored"
            )
            if r.get("stored_unread"):
                bound = r.get("in_flight_at_stop")
                line += f" ({r['stored_unread']} stored with their 202 unread: in flight when wrk stopped" + (
                    f", at most {bound})" if bound is not None else ")"
                )
            if r.get("quarantined"):
                line += f"; {r['quarantined']} quarantined (a rule fault)"
            out.append(line + ".")
    return out


def claim_section(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    paths: list[tuple[str, str]] = []
    for r in rows:
        if (r["engine"], r["queue"]) not in paths:
            paths.append((r["engine"], r["queue"]))

    def name(engine: str, queue: str) -> str:
        if queue.startswith("switchboard"):
            return f"Switchboard {ENGINE_LABEL[engine]}{queue.removeprefix('switchboard')}"
        if queue.startswith("bare MCP SDK"):
            return queue.replace("bare MCP SDK", "bare MCP SDK floor")
        return queue.replace("pgqueuer", "PgQueuer")

    claimers = sorted({r["claimers"] for r in rows})
    grid = {(r["engine"], r["queue"], r["claimers"]): r for r in rows}
    body = []
    for engine, queue in paths:
        line: list[Any] = [name(engine, queue)]
        for n in claimers:
            cell = grid.get((engine, queue, n))
            if cell is None:
                line.append(None)
            elif cell.get("note"):
                line.append(cell["note"])
            else:
                line.append(
                    f"{cell['cycles_per_second']:,.0f} ({cell.get('cycle_p50_ms', 0):.1f} / "
                    f"{cell.get('cycle_p99_ms', 0):.1f} ms)"
                )
        body.append(line)
    out = [
        "\n### Claim cycles (`claim_next` + `complete`) per second\n",
        table(["path", *(f"{n} claimer{'s' if n > 1 else ''}" for n in claimers)], body),
        "\nEach cell: cycles/s (p50 / p99 of one cycle; in the max/batch 10 rows a cycle's time is its "
        "batch's time over the todos it brought).",
    ]
    metered = [r for r in rows if r.get("server_cpu_ms_per_cycle") is not None]
    if metered:
        out += [
            "\n#### CPU per cycle over MCP (ms)\n",
            table(
                [
                    "path",
                    "claimers",
                    "cycles/s",
                    "server",
                    "clients (the sessions: SDK or lean)",
                    "PostgreSQL",
                ],
                [
                    [
                        name(r["engine"], r["queue"]),
                        r["claimers"],
                        f"{r['cycles_per_second']:,.0f}",
                        r.get("server_cpu_ms_per_cycle"),
                        r.get("client_cpu_ms_per_cycle"),
                        r.get("database_cpu_ms_per_cycle"),
                    ]
                    for r in metered
                ],
            ),
            "\nThe server, the clients and the database share the machine's cores: a rate is a share "
            "of them, the CPU per cycle is what each side spends.",
        ]
    return out


CALL_KINDS = {
    "refused": "a call refused (`complete` without `todo_id`): the MCP path, no statement",
    "empty claim": (
        "`claim_next` finding nothing: one claim statement (PostgreSQL: and a look without a lock)"
    ),
    "cycle": "`claim_next` + `complete`, per call",
    "floor cycle": "bare MCP SDK floor: the same loop, per call",
    "floor cycle, waiting": "the floor, each call waiting {delay} ms first (doing nothing)",
}


def calls_section(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    body = []
    for r in rows:
        what = CALL_KINDS.get(r["kind"], r["kind"]).format(delay=r.get("delay_ms"))
        body.append(
            [
                ENGINE_LABEL.get(r["engine"], r["engine"]),
                what,
                r.get("server_cpu_ms_per_call"),
                r.get("client_cpu_ms_per_call"),
                r.get("database_cpu_ms_per_call"),
                r.get("wall_ms_per_call"),
            ]
        )
    return [
        "\n### One agent's calls over MCP, one at a time (ms per tool call)\n",
        table(["engine", "call", "server CPU", "client CPU", "PostgreSQL CPU", "wall"], body),
        f"\nThe median of {rows[0]['rounds']} rounds of {rows[0]['calls']} calls each, the rows of a "
        "round run one after another (`bench/calls.py`). The waiting floor shows what a call's wait "
        "alone costs the server and the client on this machine.",
    ]


def crash_section(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    return [
        "\n### kill -9 under ingest load: acked / stored / duplicated\n",
        table(
            [
                "killed",
                "engine",
                "deliveries",
                "kills",
                "acked",
                "stored",
                "duplicated",
                "answered as duplicate",
                "answers by status",
                "restart p50 / max s",
                "verdict",
            ],
            [
                [
                    r["killed"],
                    ENGINE_LABEL[r["engine"]],
                    r["deliveries"],
                    r["kills"],
                    r["acked"],
                    r["stored"],
                    r["duplicated"],
                    r["answered_as_duplicate"],
                    ", ".join(f"{'no answer' if s == '-1' else s}: {n:,}" for s, n in r["answers"].items()),
                    f"{r['restart_p50_s']} / {r['restart_max_s']}",
                    r["verdict"],
                ]
                for r in rows
            ],
        ),
    ]


def other_sections(by: dict[str, list[dict[str, Any]]]) -> list[str]:
    out: list[str] = []
    backlog = by.get("claim_backlog", [])
    if backlog:
        out.append("\n### `claim_next` latency vs pending backlog\n")
        out.append(
            table(
                [
                    "engine",
                    "statistics",
                    "pending",
                    "claims",
                    "p50 ms",
                    "p99 ms",
                    "complete p50 ms",
                    "complete p99 ms",
                    "build s",
                    "pick walks",
                ],
                [
                    [
                        ENGINE_LABEL[r["engine"]],
                        "-" if r["engine"] == "sqlite" else ("ANALYZE" if r.get("analyzed") else "stale"),
                        r["backlog"],
                        r.get("claim_n"),
                        r.get("claim_p50_ms"),
                        r.get("claim_p99_ms"),
                        r.get("complete_p50_ms"),
                        r.get("complete_p99_ms"),
                        r["build_seconds"],
                        r.get("pick_index", "?"),
                    ]
                    for r in backlog
                ],
            )
        )

    doorbell = by.get("doorbell", [])
    if doorbell:
        out.append("\n### Doorbell: delivery POST → `notifications/claude/channel` at the SDK client\n")
        out.append(
            table(
                ["engine", "deliveries", "missed", "202 p50 ms", "202 p99 ms", "ring p50 ms", "ring p99 ms"],
                [
                    [
                        ENGINE_LABEL[r["engine"]],
                        r["deliveries"],
                        r["missed_rings"],
                        r.get("ack_p50_ms"),
                        r.get("ack_p99_ms"),
                        r.get("ring_p50_ms"),
                        r.get("ring_p99_ms"),
                    ]
                    for r in doorbell
                ],
            )
        )

    reply = by.get("reply_overhead", [])
    if reply:
        out.append("\n### Reply overhead over the provider call\n")
        out.append(
            table(
                [
                    "engine",
                    "path",
                    "replies",
                    "provider p50/p99 ms",
                    "reply p50/p99 ms",
                    "overhead p50/p99 ms",
                ],
                [
                    [
                        ENGINE_LABEL[r["engine"]],
                        r["path"],
                        r["replies"],
                        f"{r['provider_p50_ms']:.2f} / {r['provider_p99_ms']:.2f}",
                        f"{r['reply_p50_ms']:.2f} / {r['reply_p99_ms']:.2f}",
                        f"{r['overhead_p50_ms']:.2f} / {r['overhead_p99_ms']:.2f}",
                    ]
                    for r in reply
                ],
            )
        )
    return out


def render(rows: list[dict[str, Any]]) -> str:
    by: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by.setdefault(row["benchmark"], []).append(row)
    out = machine_line(rows)
    out += ingest_section(by.get("ingest", []))
    out += claim_section(by.get("claim_cycles", []))
    out += calls_section(by.get("mcp_calls", []))
    out += other_sections(by)
    out += crash_section(by.get("crash", []))
    return "\n".join(out)
