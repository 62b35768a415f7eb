"""Todos: minting them, reading them, the agent's lifecycle verbs and the background passes.

MCP, the API, the web UI and the CLI call these functions and never touch the table themselves.
The modules are split by who uses them: ``create`` (ingest and ``todo push``), ``views`` (the JSON
every surface shows), ``queries`` (operators and the board, by owner scope: filters, cursor pages,
counts), ``operator`` (an operator's requeue, release and cancel, one by one or in bulk, each kept
on the todo's history) and ``lifecycle`` (the agent's verbs, the lease reaper and the retry
scheduler), whose SQL is in ``statements``. This package re-exports their public names, so
callers keep writing ``todos.claim_next(...)``; the operator's actions stay under their module's
name (``todos.operator.requeue``), apart from the agent's verbs of the same names.
"""

from switchboard.db import rfc3339
from switchboard.todos.create import (
    DEFAULT_MAX_ATTEMPTS,
    MAX_PAYLOAD_BYTES,
    TITLE_LIMIT,
    encode_payload,
    new_todo_row,
    new_todo_values,
    push,
)
from switchboard.todos.lifecycle import (
    CLAIM_MAX,
    ERROR_MAX_CHARS,
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    RESULT_MAX_BYTES,
    RETRY_BASE_SECONDS,
    RETRY_MAX_SECONDS,
    STATES,
    SUMMARY_MAX_CHARS,
    SWEEP_BATCH,
    claim,
    claim_many,
    claim_next,
    complete,
    fail,
    get_todo,
    heartbeat,
    lifecycle_pass,
    list_todos,
    reap_leases,
    release,
    retry_delay,
    schedule_retries,
)
from switchboard.todos.queries import (
    BOARD_STATES,
    OPERATOR_LIMIT_MAX,
    TodoFilter,
    filter_choices,
    list_in_scopes,
    operator_row,
    parse_time,
    scoped_page,
    show_in_scopes,
    state_counts,
)
from switchboard.todos.views import (
    attempt_view,
    payload_of,
    public_reply_to,
    replies_summary,
    reply_view,
    todo_detail,
    todo_row,
)

__all__ = [
    "BOARD_STATES",
    "CLAIM_MAX",
    "DEFAULT_MAX_ATTEMPTS",
    "ERROR_MAX_CHARS",
    "LIST_LIMIT_DEFAULT",
    "LIST_LIMIT_MAX",
    "MAX_PAYLOAD_BYTES",
    "OPERATOR_LIMIT_MAX",
    "RESULT_MAX_BYTES",
    "RETRY_BASE_SECONDS",
    "RETRY_MAX_SECONDS",
    "STATES",
    "SUMMARY_MAX_CHARS",
    "SWEEP_BATCH",
    "TITLE_LIMIT",
    "TodoFilter",
    "attempt_view",
    "claim",
    "claim_many",
    "claim_next",
    "complete",
    "encode_payload",
    "fail",
    "filter_choices",
    "get_todo",
    "heartbeat",
    "lifecycle_pass",
    "list_in_scopes",
    "list_todos",
    "new_todo_row",
    "new_todo_values",
    "operator_row",
    "parse_time",
    "payload_of",
    "public_reply_to",
    "push",
    "reap_leases",
    "release",
    "replies_summary",
    "reply_view",
    "retry_delay",
    "rfc3339",
    "schedule_retries",
    "scoped_page",
    "show_in_scopes",
    "state_counts",
    "todo_detail",
    "todo_row",
]
