"""switchboard.rules: the shape and limits of a webhook's rule set, the forbidden-name check and the
jq wrapper every rule runs in (evaluated here with the jq library in-process; the sandbox's own
tests run it in its workers)."""

from __future__ import annotations

import json
from typing import Any

import jq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from switchboard.rules import (
    FORBIDDEN_NAMES,
    FORBIDDEN_VARIABLES,
    MAX_EXPR_BYTES,
    MAX_PARAMS_BYTES,
    MAX_RULES,
    Action,
    RuleError,
    RuleSet,
    check_expression,
    check_grant,
    check_rule_set,
    expression_problem,
    forbidden_name,
    parse_rule_set,
    rule_program,
)

TARGETS = {"alice": {"default", "reviews"}, "bots": {"default"}, "ops": {"pager"}}


def check(value: object, targets: dict[str, set[str]] | None = None, queue: str = "default") -> RuleSet:
    return check_rule_set(value, targets=TARGETS if targets is None else targets, webhook_queue=queue)


def one_rule(expr: str = "true", **rule: Any) -> dict[str, Any]:
    return {"rules": [{"id": "r1", "expr": expr, "action": {"type": "queue"}, **rule}]}


def refused(value: object, targets: dict[str, set[str]] | None = None, queue: str = "default") -> RuleError:
    with pytest.raises(RuleError) as info:
        check(value, targets, queue)
    return info.value


# --- the forbidden names --------------------------------------------------------------------------

# Every name the issue forbids, each as a rule would use it. Written out rather than derived from
# FORBIDDEN_NAMES, so a name dropped from the module fails here.
FORBIDDEN = [
    ("env", "env.HOME"),
    ("env", '.payload | env | has("X")'),
    ("$ENV", "$ENV.HOME"),
    ("$ENV", "{$ENV}"),
    ("input", "input"),
    ("inputs", "[inputs]"),
    ("debug", "debug"),
    ("debug", 'debug("msg") | true'),
    ("stderr", "stderr"),
    ("halt", "halt"),
    ("halt_error", "halt_error(1)"),
    ("halt_error", '"x" | halt_error'),
    ("now", "now > 0"),
    ("import", 'import "lib" as lib; true'),
    ("include", 'include "lib"; true'),
    ("input_filename", "input_filename"),
    ("$__loc__", "$__loc__"),
    ("get_search_list", "get_search_list"),
    ("modulemeta", '"lib" | modulemeta'),
    ("input_line_number", "input_line_number"),
    ("$__prog_args", "$__prog_args"),
    ("get_prog_origin", "get_prog_origin"),
    ("get_jq_origin", "get_jq_origin"),
    # Wherever code can stand: interpolations, object keys and values, definitions, modules.
    ("env", '"home: \\(env.HOME)"'),
    ("env", '"a \\("b \\(env)")"'),
    ("env", "{env}"),
    ("env", "{a: env}"),
    ("env", "def f: env; f"),
    ("env", "lib::env"),
    ("env", ".a as $x | env"),
    ("env", "[.[] | env]"),
    ("env", "..env"),
    ("env", "1.env"),
    ("now", "# a comment\nnow"),
    ("now", '"\\(1 # a comment in an interpolation\n) \\(now)"'),
    ("$ENV", "$ # a comment\nENV"),
]


@pytest.mark.parametrize(("name", "expr"), FORBIDDEN)
def test_every_forbidden_name_is_refused_at_check(name: str, expr: str) -> None:
    error = refused(one_rule(expr))
    assert error.code == "forbidden_function"
    assert error.rule_id == "r1"
    assert f"rule 'r1': {name} is not available to rules" in error.message


@pytest.mark.parametrize(
    "expr",
    [
        '"env"',
        '"input and inputs and $ENV"',
        '.payload.comment.body | test("now|halt")',
        ".payload.env",
        ".env",
        '."env"',
        '.["env"]',
        "$params.env",
        "# env, $ENV and now are only mentioned here\ntrue",
        '"\\(.payload.action) is not env"',
        '"escaped \\" quote then env"',
        '"a backslash \\\\" | . == "env"',
        'def envelope: .; envelope | .source == "github"',
        '.payload | has("inputs")',
        '@sh "echo \\(.payload.action)"',
        'getpath(["payload", "action"]) == "opened"',
        '[.payload.comment.body | splits(" +")] | length > 2',
        '.payload.action | ltrimstr("env")',
        'reduce .payload.labels[] as $l (false; . or $l.name == "agent")',
        '.payload as {action: $a} | $a == "opened"',
        '.event == "issues" and ($params.labels | index("agent"))',
    ],
)
def test_names_in_strings_fields_and_comments_are_allowed(expr: str) -> None:
    rule_set = check(one_rule(expr))
    assert rule_set.rules[0].expr == expr


# --- codes and messages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        ([], "invalid_rule", "rules must be a JSON object"),
        ({"rules": {}}, "invalid_rule", '"rules" must be a list'),
        ({"rules": [], "extra": 1}, "invalid_rule", "the rule set has unknown key 'extra'"),
        ({"rules": ["true"]}, "invalid_rule", "rule 1 must be an object"),
        ({"rules": [{"id": "R1", "expr": "1", "action": {"type": "drop"}}]}, "invalid_rule", "id must match"),
        ({"rules": [{"id": "-r", "expr": "1", "action": {"type": "drop"}}]}, "invalid_rule", "id must match"),
        ({"rules": [{"id": "r" * 41, "expr": "1", "action": {"type": "drop"}}]}, "invalid_rule", "id must"),
        ({"rules": [{"expr": "1", "action": {"type": "drop"}}]}, "invalid_rule", "id must match"),
        ({"rules": [{"id": "r1", "action": {"type": "drop"}}]}, "invalid_rule", "rule 'r1' has no expr"),
        ({"rules": [{"id": "r1", "expr": "1"}]}, "invalid_rule", "rule 'r1' has no action"),
        (one_rule(when="x"), "invalid_rule", "rule 'r1' has unknown key 'when'"),
        (one_rule(name=""), "invalid_rule", "name must be 1-100 characters"),
        (one_rule(name="n" * 101), "invalid_rule", "name must be 1-100 characters"),
        (one_rule(name="two\nlines"), "invalid_rule", "name must be one printable line"),
        (one_rule(name=7), "invalid_rule", "name must be 1-100 characters"),
        (one_rule(action="queue"), "invalid_rule", 'action must be an object whose "type"'),
        (one_rule(action={"type": "route"}), "invalid_rule", "is queue, drop or quarantine"),
        (one_rule(action={"type": "drop", "queue": "x"}), "invalid_rule", "a drop action has unknown key"),
        (
            one_rule(action={"type": "queue", "to": "x"}),
            "invalid_rule",
            "a queue action has unknown key 'to'",
        ),
        (one_rule(action={"type": "queue", "queue": "Bad Queue"}), "invalid_rule", "must match [a-z0-9]"),
        (one_rule(action={"type": "queue", "queue": "quarantine"}), "invalid_rule", "is reserved"),
        (one_rule(action={"type": "queue", "queue": 5}), "invalid_rule", "queue 5 must match"),
        (one_rule(action={"type": "queue", "endpoints": []}), "invalid_rule", "non-empty list"),
        (one_rule(action={"type": "queue", "endpoints": "alice"}), "invalid_rule", "non-empty list"),
        (
            one_rule(action={"type": "queue", "endpoints": ["alice", "alice"]}),
            "invalid_rule",
            "names an endpoint twice",
        ),
        (
            one_rule(action={"type": "queue", "endpoints": ["mallory"]}),
            "invalid_rule",
            "endpoint 'mallory' is not a target of this webhook (targets: alice, bots, ops)",
        ),
        (one_rule(action={"type": "queue", "once": "yes"}), "invalid_rule", "once must be true or false"),
        (
            one_rule(action={"type": "queue", "exclusive": 1}),
            "invalid_rule",
            "exclusive must be true or false",
        ),
        ({"rules": [], "default_action": {"type": "hold"}}, "invalid_rule", "default_action: action must"),
        (one_rule(7), "invalid_expression", "rule 'r1': expr must be a string of jq"),
        (one_rule(""), "invalid_expression", "expr is empty"),
        (one_rule("  # only a comment"), "invalid_expression", "expr is empty"),
        (one_rule(".a | (1"), "invalid_expression", "unclosed '('"),
        (one_rule(".a)"), "invalid_expression", "unbalanced ')' at line 1, column 3"),
        (one_rule("[.a}"), "invalid_expression", "unbalanced '}' at line 1, column 4"),
        (one_rule('"open'), "invalid_expression", "unterminated string"),
        (one_rule('"\\(.a"'), "invalid_expression", "unterminated string"),
        (one_rule('"\\(.a'), "invalid_expression", "unclosed string interpolation"),
        (one_rule("true # go on \\\n)"), "invalid_expression", "a comment ends with a backslash"),
        (one_rule("true #\r)"), "invalid_expression", "carriage return inside its line"),
        (one_rule("true\x00"), "invalid_expression", "control character U+0000"),
        (one_rule("\ud800"), "invalid_expression", "not valid UTF-8"),
        (one_rule("env"), "forbidden_function", "env is not available to rules"),
        ({"rules": [], "params": []}, "invalid_params", "params must be a JSON object"),
        ({"rules": [], "params": "x"}, "invalid_params", "params must be a JSON object"),
        ({"rules": [], "params": {"x": float("nan")}}, "invalid_params", "plain JSON"),
        ({"rules": [], "params": {"x": "\ud800"}}, "invalid_params", "plain JSON"),
    ],
)
def test_each_refusal_has_its_code_and_says_why(value: object, code: str, message: str) -> None:
    error = refused(value)
    assert error.code == code
    assert message in error.message
    assert error.as_dict()["error"] == code


def test_a_refused_rule_is_named() -> None:
    value = {
        "rules": [
            {"id": "ok", "expr": "true", "action": {"type": "drop"}},
            {"id": "bad", "expr": "(", "action": {"type": "drop"}},
        ]
    }
    error = refused(value)
    assert (error.code, error.rule_id) == ("invalid_expression", "bad")
    assert error.as_dict() == {"error": "invalid_expression", "message": error.message, "rule": "bad"}
    duplicate = {"rules": [{"id": "a", "expr": "1", "action": {"type": "drop"}}] * 2}
    error = refused(duplicate)
    assert (error.code, error.rule_id, error.message) == ("invalid_rule", "a", "rule id 'a' is used twice")


# --- limits ---------------------------------------------------------------------------------------


def rules(count: int) -> dict[str, Any]:
    return {"rules": [{"id": f"r{n}", "expr": "true", "action": {"type": "drop"}} for n in range(count)]}


def test_limits_hold_at_their_edge_and_refuse_past_it() -> None:
    assert len(check(rules(MAX_RULES)).rules) == 32
    error = refused(rules(MAX_RULES + 1))
    assert (error.code, error.message) == ("too_many_rules", "33 rules; a webhook has at most 32")

    # 4 KiB of UTF-8, not of characters: "é" is two bytes.
    at_limit = '"' + "é" * ((MAX_EXPR_BYTES - 2) // 2) + '"'
    assert len(at_limit.encode()) == MAX_EXPR_BYTES
    check(one_rule(at_limit))
    error = refused(one_rule(at_limit[:-1] + 'é"'))
    assert error.code == "invalid_expression"
    assert "4098 bytes; at most 4096" in error.message

    filler = MAX_PARAMS_BYTES - len(json.dumps({"s": ""}, separators=(",", ":")))
    check({"rules": [], "params": {"s": "x" * filler}})
    error = refused({"rules": [], "params": {"s": "x" * (filler + 1)}})
    assert (error.code, error.message) == ("invalid_params", "params are 16385 bytes as JSON; at most 16384")

    check(one_rule(name="n" * 100))
    check({"rules": [{"id": "a" * 40, "expr": "1", "action": {"type": "drop"}}]})


# --- grants ---------------------------------------------------------------------------------------


def test_not_granted_when_no_chosen_endpoint_holds_the_queue() -> None:
    # The webhook's queue by default: "pager" is granted to ops only, so it is fine for all targets.
    check(one_rule(action={"type": "queue"}), queue="pager")
    error = refused(one_rule(action={"type": "queue"}), queue="nightly")
    assert (error.code, error.rule_id) == ("not_granted", "r1")
    assert error.message == "rule 'r1': queue 'nightly' is not granted to any of the webhook's targets"

    # A named queue granted to one target of several is fine when no endpoints are named.
    check(one_rule(action={"type": "queue", "queue": "reviews"}))
    # Named endpoints: each must hold it.
    check(one_rule(action={"type": "queue", "queue": "reviews", "endpoints": ["alice"]}))
    error = refused(one_rule(action={"type": "queue", "queue": "reviews", "endpoints": ["alice", "bots"]}))
    assert error.code == "not_granted"
    assert error.message == (
        "rule 'r1': queue 'reviews' is not granted to endpoint 'bots' (its queues: default)"
    )
    error = refused(
        {"rules": [], "default_action": {"type": "queue", "queue": "reviews", "endpoints": ["ops"]}}
    )
    assert (error.code, error.rule_id) == ("not_granted", None)
    assert error.message.startswith("default_action: queue 'reviews' is not granted to endpoint 'ops'")
    # Drop and quarantine send nowhere, so nothing needs granting.
    check({"rules": [{"id": "d", "expr": "1", "action": {"type": "drop"}}]}, targets={})


def test_check_grant_is_the_delivery_time_recheck() -> None:
    rule_set = parse_rule_set(one_rule(action={"type": "queue", "queue": "reviews", "endpoints": ["alice"]}))
    action = rule_set.rules[0].action
    check_grant(action, targets=TARGETS, webhook_queue="default", rule_id="r1")
    with pytest.raises(RuleError) as info:
        check_grant(action, targets={"alice": {"default"}}, webhook_queue="default", rule_id="r1")
    assert info.value.code == "not_granted"
    with pytest.raises(RuleError) as info:
        check_grant(action, targets={}, webhook_queue="default", rule_id="r1")
    assert info.value.message == "rule 'r1': endpoint 'alice' is not a target"


# --- the normalised form --------------------------------------------------------------------------


def test_as_json_is_the_normalised_form_and_reads_back_unchanged() -> None:
    value = {
        "rules": [
            {
                "id": "bots",
                "name": "Drop bots",
                "expr": '.actor.sender | endswith("[bot]")',
                "action": {"type": "drop"},
            },
            {
                "id": "reviews",
                "expr": '.event == "pull_request_review"',
                "action": {"type": "queue", "queue": "reviews", "endpoints": ["alice"], "once": True},
            },
        ],
        "default_action": {"type": "quarantine"},
        "params": {"labels": ["agent"], "n": 1.5},
    }
    rule_set = check(value)
    stored = rule_set.as_json()
    assert stored == {
        "rules": [
            {
                "id": "bots",
                "name": "Drop bots",
                "expr": '.actor.sender | endswith("[bot]")',
                "action": {"type": "drop"},
            },
            {
                "id": "reviews",
                "name": None,
                "expr": '.event == "pull_request_review"',
                "action": {
                    "type": "queue",
                    "queue": "reviews",
                    "endpoints": ["alice"],
                    "exclusive": False,
                    "once": True,
                },
            },
        ],
        "default_action": {"type": "quarantine"},
        "params": {"labels": ["agent"], "n": 1.5},
    }
    assert check(json.loads(json.dumps(stored))) == rule_set
    assert rule_set.params_json == b'{"labels":["agent"],"n":1.5}'
    assert rule_set.exprs == [
        ("bots", '.actor.sender | endswith("[bot]")'),
        ("reviews", '.event == "pull_request_review"'),
    ]
    assert rule_set.rules[1].action == Action("queue", "reviews", ("alice",), exclusive=False, once=True)
    empty = check({})
    assert (empty.rules, empty.default_action, empty.params_json) == ((), None, b"{}")


# --- the wrapper ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "result"),
    [
        ("true", True),
        ("1", True),
        ('"x"', True),
        ("{}", True),
        ("false", False),
        ("null", False),
        ("empty", False),
        (".missing", False),
        ("false, true", False),  # the first output decides
        ('true, error("never reached")', True),
        ("def f: f; 1, f", True),  # nothing after the first output runs
        ("[range(100000)]", True),  # a big value never leaves jq
        ("# a trailing comment\ntrue # closes nothing", True),
        # The expression's definitions stay inside it: the wrapper's first() is jq's.
        ("def first(f): true; null", False),
    ],
)
def test_rule_program_reduces_the_first_output_to_a_bool(expr: str, result: bool) -> None:
    assert jq.compile(rule_program(expr)).input_value({"a": 1}).all() == [result]


def test_rule_program_passes_jq_errors_on() -> None:
    with pytest.raises(ValueError, match="boom"):
        jq.compile(rule_program('error("boom")')).input_value(None).all()


# Expressions that try to close the wrapper's brackets and open new ones, so as to yield more than
# one value or something other than a bool; the middle pieces cross strings and comments too.
ENDS = ["true", "1", '"x"', ".a", "null", "empty", "# c\n", '"\\(', '")"', '"', "", "[", "]"]
MIDDLES = [",", "|", ", 1,", "] , [", "# c\n,", '"\\(1)",', ""]
ESCAPES = st.builds(
    lambda a, k, m, j, b: a + ")" * k + m + "(" * j + b,
    st.sampled_from(ENDS),
    st.integers(0, 4),
    st.sampled_from(MIDDLES),
    st.integers(0, 4),
    st.sampled_from(ENDS),
)


@settings(max_examples=300, deadline=None)
@given(ESCAPES)
@example("true))), (((true")
@example("1)),((true")
@example('true)))|"x", (((1')
def test_an_accepted_expression_cannot_escape_its_wrapper(expr: str) -> None:
    # Whatever passes the lexical check yields exactly one bool once wrapped (or fails to compile,
    # or raises a jq error). Without the check, the examples above yield 1 or three values.
    if expression_problem(expr) is not None:
        return
    try:
        program = jq.compile(".[1] as $params | .[0] | (null, (" + rule_program(expr) + "))")
    except ValueError:
        return
    try:
        outputs = program.input_value([{"a": 1}, {"p": True}]).all()
    except ValueError:
        return
    assert outputs[0] is None
    assert len(outputs) == 2
    assert isinstance(outputs[1], bool)


@pytest.mark.parametrize("expr", ["true))), (((true", "1)),((true", 'true)))|"x", (((1'])
def test_the_escapes_are_real_and_refused(expr: str) -> None:
    outputs = jq.compile(rule_program(expr)).input_value(None).all()
    assert not (len(outputs) == 1 and isinstance(outputs[0], bool))
    assert expression_problem(expr) == "unbalanced ')' at line 1, column " + str(expr.index(")") + 1)


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=60)
    | st.lists(st.sampled_from([*ENDS, *MIDDLES, "(", ")", "$", "$ENV", "env"])).map("".join)
)
def test_the_lexer_takes_any_text(expr: str) -> None:
    problem = expression_problem(expr)
    assert problem is None or isinstance(problem, str)
    if problem is None:
        name = forbidden_name(expr)
        assert name is None or name.lstrip("$") in FORBIDDEN_NAMES | FORBIDDEN_VARIABLES


# --- arbitrary input ------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
ACTIONS = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["queue", "drop", "quarantine", "other"])},
        optional={
            "queue": st.one_of(st.sampled_from(["default", "reviews", "pager", "quarantine"]), JSON),
            "endpoints": st.one_of(
                st.lists(st.sampled_from(["alice", "bots", "ops", "x"]), max_size=3), JSON
            ),
            "exclusive": JSON,
            "once": st.booleans(),
        },
    ),
)
RULES = st.fixed_dictionaries(
    {
        "id": st.one_of(st.sampled_from(["r1", "r2", "a-b_c"]), JSON),
        "expr": st.one_of(st.sampled_from([*ENDS, *MIDDLES, "env", ".a == 1"]), st.text(max_size=30), JSON),
        "action": ACTIONS,
    },
    optional={"name": JSON},
)
RULE_SETS = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"rules": st.one_of(st.lists(RULES, max_size=5), JSON)},
        optional={"default_action": st.one_of(st.none(), ACTIONS), "params": JSON},
    ),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RULE_SETS)
def test_check_rule_set_raises_nothing_but_rule_error(value: object) -> None:
    try:
        rule_set = check(value)
    except RuleError as error:
        assert error.code in {
            "invalid_rule",
            "invalid_expression",
            "forbidden_function",
            "not_granted",
            "too_many_rules",
            "invalid_params",
        }
        assert error.message
        return
    assert check(rule_set.as_json()) == rule_set


def test_check_expression_returns_the_expression() -> None:
    assert check_expression(".a == 1") == ".a == 1"
    with pytest.raises(RuleError, match="expr: env is not available"):
        check_expression("env")


def test_deeply_nested_input_is_refused_not_recursed_into() -> None:
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    error = refused({"rules": [{"id": deep, "expr": "1", "action": {"type": "drop"}}]})
    assert (error.code, error.message) == (
        "invalid_rule",
        "rule 1: id must match [a-z0-9][a-z0-9_-]{0,39} (got [[[[...]]]])",
    )
    error = refused({"rules": [], "params": {"a": deep}})
    assert error.code == "invalid_params"
    assert "not nested too deeply" in error.message
