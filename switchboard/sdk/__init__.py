"""The public surface for provider plugin authors: import everything from here (and, in tests, from
``switchboard.testing``). Anything else in ``switchboard`` may change without notice; what is listed
in ``__all__`` keeps its meaning within a minor version (a plugin depends on
``switchboard>=0.2,<0.3``).

* the hook marker: ``hookimpl`` (the one hook is ``register_kinds(register)``);
* what a kind is: ``SourceKind`` (``verify``, ``derive_address``, ``echo_clues``, ``actors`` and its
  ``TrustSpec``), ``ConnectionKind``
  (``post``, ``test``, account-key rules), ``Setting`` and ``api_url_setting`` for its operator
  settings, ``Rule`` and ``secret_rule`` for its credential formats;
* what the callables get and return: ``Delivery``, ``Verdict``, ``Address``, ``EchoClues``, ``Actors``,
  ``ReplyPost``, ``PostResult``, ``ConnectionCheck``, ``CheckResult``, ``HttpClient`` (the guarded
  client's shape), ``Response``;
* inbound checks that never raise on hostile input: ``signature_matches``, ``same``,
  ``timestamp_within``, ``rfc3339``, ``within``, ``valid_repo``, ``valid_host``, ``valid_id``, … ;
* who a delivery names: ``actor_value``, ``actor_at``, ``actors_of``, ``forge_actors``;
* outbound answers as results: ``failure`` (REST), ``graphql_failure``, ``result_of_error``,
  ``json_dict``, ``int_id``, ``https_link``, ``retry_after_seconds``.
"""

from __future__ import annotations

from switchboard.addresses import (
    comment_echo_clues,
    forge_comment_address,
    https_base,
    instance_base,
    instance_key,
    origin_of,
    same_instance,
    valid_host,
    valid_number,
    valid_repo,
    valid_slack_id,
    valid_slack_ts,
)
from switchboard.hookspecs import hookimpl
from switchboard.outbound import (
    OutboundError,
    class_of_status,
    failure,
    header,
    host_of,
    https_link,
    int_id,
    json_dict,
    normalize_host,
    normalize_https_base,
    result_of_error,
    retry_after_seconds,
)
from switchboard.provider import (
    MARKER_EVENT_TYPE,
    Actors,
    Address,
    CheckResult,
    ConnectionCheck,
    ConnectionKind,
    Delivery,
    EchoClues,
    ErrorClass,
    HttpClient,
    PostResult,
    PostState,
    ReplyPost,
    Response,
    SecretOrigin,
    Setting,
    SourceKind,
    TrustSpec,
    Verdict,
    find_marker,
    hmac_sha256_hex,
    json_object,
    no_address,
    no_echo_clues,
    one_line,
    reply_marker,
    same,
)
from switchboard.sdk.actors import actor_at, actors_of, forge_actors
from switchboard.sdk.checks import (
    header_value,
    rfc3339,
    signature_matches,
    timestamp_within,
    unix_seconds,
    valid_id,
    valid_uuid,
    within,
)
from switchboard.sdk.results import (
    GRAPHQL_CLASSES,
    api_url_setting,
    class_of_code,
    error_code,
    graphql_failure,
    secret_rule,
)
from switchboard.secretscan import Rule
from switchboard.trust import actor_value

__all__ = [
    "GRAPHQL_CLASSES",
    "MARKER_EVENT_TYPE",
    "Actors",
    "Address",
    "CheckResult",
    "ConnectionCheck",
    "ConnectionKind",
    "Delivery",
    "EchoClues",
    "ErrorClass",
    "HttpClient",
    "OutboundError",
    "PostResult",
    "PostState",
    "ReplyPost",
    "Response",
    "Rule",
    "SecretOrigin",
    "Setting",
    "SourceKind",
    "TrustSpec",
    "Verdict",
    "actor_at",
    "actor_value",
    "actors_of",
    "api_url_setting",
    "class_of_code",
    "class_of_status",
    "comment_echo_clues",
    "error_code",
    "failure",
    "find_marker",
    "forge_actors",
    "forge_comment_address",
    "graphql_failure",
    "header",
    "header_value",
    "hmac_sha256_hex",
    "hookimpl",
    "host_of",
    "https_base",
    "https_link",
    "instance_base",
    "instance_key",
    "int_id",
    "json_dict",
    "json_object",
    "no_address",
    "no_echo_clues",
    "normalize_host",
    "normalize_https_base",
    "one_line",
    "origin_of",
    "reply_marker",
    "result_of_error",
    "retry_after_seconds",
    "rfc3339",
    "same",
    "same_instance",
    "secret_rule",
    "signature_matches",
    "timestamp_within",
    "unix_seconds",
    "valid_host",
    "valid_id",
    "valid_number",
    "valid_repo",
    "valid_slack_id",
    "valid_slack_ts",
    "valid_uuid",
    "within",
]
