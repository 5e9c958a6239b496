"""A schema violation in a user's file names the field and the rule, never the value.

Issue 60: ``yamlfile.validate`` put jsonschema's own message on its one line, and that message
quotes the value (``'get-token --secret X' is not of type 'object'``): a kubeconfig's token or exec
command line went to the CI log. Every rule the harness's schemas use is broken here by a value
that holds a planted secret, through the one helper every reader of a user's file calls.
"""

from __future__ import annotations

import os
from typing import Any

import jsonschema
import pytest

from dra_harness import yamlfile
from dra_harness.contention import scenario

SECRET = "Planted" + os.urandom(6).hex()
NUMBER = 987654321  # a numeric secret: a PIN, an account number


class Bad(ValueError):
    pass


#: (the rule, a value breaking it that holds the secret, what the line says)
RULES: list[tuple[dict[str, Any], Any, str]] = [
    ({"type": "object"}, f"get-token --secret {SECRET}", "must be a mapping, not a string"),
    ({"type": ["array", "null"]}, {"name": "u", "user": {"token": SECRET}}, "must be a list or null, not a mapping"),
    ({"type": "string"}, [SECRET], "must be a string, not a list"),
    ({"type": "integer"}, SECRET, "must be an integer, not a string"),
    ({"enum": ["exclusive", "shared"]}, SECRET, "must be one of 'exclusive', 'shared'"),
    ({"const": "v1"}, SECRET, "must be 'v1'"),
    ({"pattern": "^[a-z]+$"}, SECRET, "does not match the pattern ^[a-z]+$"),
    ({"minimum": 0}, -NUMBER, "must be at least 0"),
    ({"maximum": 10}, NUMBER, "must be at most 10"),
    ({"exclusiveMinimum": 0}, -NUMBER, "must be more than 0"),
    ({"exclusiveMaximum": 0}, NUMBER, "must be less than 0"),
    ({"multipleOf": 2}, NUMBER, "must be a multiple of 2"),
    ({"minLength": 1}, "", "must not be empty"),
    ({"minLength": 40}, SECRET, "must be at least 40 characters long"),
    ({"maxLength": 3}, SECRET, "must be at most 3 characters long"),
    ({"minItems": 3}, [SECRET], "must hold at least 3 items"),
    ({"maxItems": 1}, [SECRET, SECRET], "must hold at most 1 items"),
    ({"minProperties": 2}, {"token": SECRET}, "must hold at least 2 fields"),
    ({"uniqueItems": True}, [SECRET, SECRET], "must not hold the same item twice"),
    ({"contains": {"type": "integer"}}, [SECRET], "holds no item of the kind it needs"),
    ({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, SECRET, "matches none of the forms allowed here"),
    ({"oneOf": [{"type": "string"}, {"minLength": 1}]}, SECRET, "matches more than one form allowed here"),
    ({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, SECRET, "matches none of the forms allowed here"),
    ({"not": {"type": "string"}}, SECRET, "is a value not allowed here"),
    ({"propertyNames": {"pattern": "^[a-z]+$"}}, {SECRET: 1}, "does not match the pattern ^[a-z]+$"),
    # jsonschema names only the schema's fields and the file's keys for these: kept as they were.
    ({"required": ["token"]}, {"password": SECRET}, "'token' is a required property"),
    ({"properties": {}, "additionalProperties": False}, {"x": SECRET}, "Additional properties are not allowed ('x' was unexpected)"),
]


@pytest.mark.parametrize("rule, value, says", RULES, ids=[next(iter(r)) for r, _, _ in RULES])
def test_a_broken_rule_names_the_field_and_the_rule_never_the_value(rule, value, says):
    schema = {"type": "object", "properties": {"users": {"type": "array", "items": {"type": "object", "properties": {"user": rule}}}}}
    with pytest.raises(Bad) as e:
        yamlfile.validate({"users": [{"user": value}]}, schema, Bad, "kubeconfig f")
    assert str(e.value) == f"kubeconfig f: users.0.user: {says}"
    assert SECRET not in str(e.value) and str(NUMBER) not in str(e.value)
    # Control: jsonschema's own message, which the line used to carry, quotes the value (but for the rules that name
    # only keys or the schema's constant, and an empty string).
    message = next(jsonschema.Draft202012Validator(schema).iter_errors({"users": [{"user": value}]})).message
    if not {"required", "additionalProperties", "const"} & set(rule) and value != "":
        assert SECRET in message or str(NUMBER) in message, message


def test_every_rule_the_harness_schemas_use_has_its_own_sentence():
    """A rule added to a schema later falls back to naming the rule; this lists the ones the harness uses today."""
    used = {r for rule, _, _ in RULES for r in rule} - {"properties"}
    assert {"type", "enum", "pattern", "minimum", "maximum", "exclusiveMinimum", "minLength", "minItems", "minProperties",
            "uniqueItems", "oneOf", "contains", "propertyNames", "required", "additionalProperties"} <= used
    err = next(jsonschema.Draft202012Validator({"maxProperties": 0}).iter_errors({"a": SECRET}))
    assert yamlfile.problem(err) == "must hold at most 0 fields"
    err = next(jsonschema.Draft202012Validator({"dependentSchemas": {"a": {"required": ["b"]}}}).iter_errors({"a": SECRET}))
    assert SECRET not in yamlfile.problem(err)


def test_a_scenario_duration_that_is_not_one_is_not_quoted():
    raw = {"name": "s", "time_compression": 60, "cluster": {"nodes": 1, "devices_per_node": 1},
           "tiers": [{"name": "t", "priority": 1, "devices_per_job": 1, "arrival": {"process": "fixed", "interval": "1m"},
                      "duration": {"distribution": "fixed", "value": "1m"}, "tolerable_wait": SECRET}],
           "designs": {"shared": {}}}
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.parse(raw, "f.yaml")
    assert "tiers[0].tolerable_wait: is not a duration" in str(e.value) and SECRET not in str(e.value)
