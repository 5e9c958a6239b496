"""What the API server's CEL type checker rejects in a DRA selector, found offline.

cel-python evaluates dynamically: asked ``device.capacity[d].memory >= quantity("64Gi")`` it
compares two numbers and says "matches", while Kubernetes rejects the selector when the
object is written (``found no matching overload for '_>=_' applied to '(kubernetes.Quantity,
kubernetes.Quantity)'``): quantities and versions compare only through their methods
(``compareTo``, ``isGreaterThan``, ``isLessThan``). A check that accepts what the API server
rejects is wrong evidence, so :func:`check` infers the static types the DRA environment
declares (capacity values are quantities, attributes are dynamic, ``quantity()`` and
``semver()`` return their types) over celpy's parse tree and reports what has no overload.
``tests/integration/test_cel_agreement.py`` holds a corpus against a real API server.
"""

from __future__ import annotations

from lark import Token, Tree

from dra_harness.errors import CheckError

#: Types named as the API server's messages name them.
QUANTITY, SEMVER, DYN = "kubernetes.Quantity", "kubernetes.Semver", "dyn"
_OPAQUE = (QUANTITY, SEMVER)
_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "in": "@in",
           "add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}
_LITERAL = {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "STRING_LIT": "string",
            "BYTES_LIT": "bytes", "BOOL_LIT": "bool", "NULL_LIT": "null_type"}
_FUNCTIONS = {"quantity": QUANTITY, "semver": SEMVER, "isQuantity": "bool", "isSemver": "bool", "size": "int",
              "int": "int", "uint": "uint", "double": "double", "string": "string", "bool": "bool"}
_METHODS = {"compareTo": "int", "isGreaterThan": "bool", "isLessThan": "bool", "asInteger": "int",
            "asApproximateFloat": "double", "isInteger": "bool", "sign": "int", "add": QUANTITY, "sub": QUANTITY,
            "major": "int", "minor": "int", "patch": "int", "startsWith": "bool", "endsWith": "bool",
            "contains": "bool", "matches": "bool", "exists": "bool", "all": "bool", "exists_one": "bool", "size": "int"}


class TypeCheckError(CheckError):
    """The expression has no overload for an operator, or is not a bool; the message is the API server's wording."""


def check(tree: Tree) -> str:
    """The static type of a compiled selector; raises :class:`TypeCheckError` where Kubernetes' checker would."""
    kind = _type(tree)
    if kind not in ("bool", DYN):
        raise TypeCheckError(f"must evaluate to bool or the unknown type, not {kind}")
    return kind


def _type(node: Tree | Token) -> str:
    if isinstance(node, Token):
        return _LITERAL.get(node.type, DYN)
    rule, kids = str(node.data), node.children
    if rule in ("conditionalor", "conditionaland") and len(kids) == 2:
        for k in kids:
            _type(k)
        return "bool"
    if rule == "expr" and len(kids) == 3:  # a ? b : c
        _type(kids[0])
        left, right = _type(kids[1]), _type(kids[2])
        return left if left == right else DYN
    if rule in ("relation", "addition", "multiplication") and len(kids) == 2 and isinstance(kids[0], Tree) \
            and str(kids[0].data).startswith(f"{rule}_"):  # [<rule>_<op>[left], right]
        return _operator(str(kids[0].data)[len(rule) + 1:], [kids[0].children[0], kids[1]])
    if rule == "unary" and len(kids) == 2:  # unary_not / unary_neg, then the operand
        operand = _type(kids[1])
        if operand in _OPAQUE:
            raise TypeCheckError(_no_overload("!_" if str(kids[0].data) == "unary_not" else "-_", operand))
        return "bool" if str(kids[0].data) == "unary_not" else operand
    if rule == "member_dot":
        return _field(kids)
    if rule == "member_dot_arg":
        receiver = _type(kids[0])
        for arg in kids[2:]:
            _type(arg)
        if receiver in _OPAQUE and str(kids[1]) not in _METHODS:
            raise TypeCheckError(f"undeclared reference to '{kids[1]}' (in container '')")
        return _METHODS.get(str(kids[1]), DYN)
    if rule == "member_index":
        _type(kids[1])
        return DYN
    if rule == "ident_arg":
        for arg in kids[1:]:
            _type(arg)
        return _FUNCTIONS.get(str(kids[0]), DYN)
    if rule == "literal":
        return _type(kids[0])
    if rule in ("list_lit", "map_lit"):
        for k in kids:
            _type(k)
        return "list" if rule == "list_lit" else "map"
    if rule == "ident":
        return DYN
    types = [_type(k) for k in kids]
    return types[0] if len(types) == 1 else DYN


def _operator(op: str, operands: list) -> str:
    left, right = (_type(k) for k in operands)
    if op in ("eq", "ne"):
        return "bool"
    if op == "in":
        return "bool"
    if left in _OPAQUE or right in _OPAQUE:
        raise TypeCheckError(_no_overload(f"_{_SYMBOL.get(op, op)}_", left, right))
    if op in ("lt", "le", "gt", "ge"):
        return "bool"
    return left if left == right else DYN


def _field(kids: list) -> str:
    """``device.driver`` is a string; ``device.capacity[d].name`` a quantity; attributes are dynamic."""
    path = _path(kids[0]) + [str(kids[1])]
    if path == ["device", "driver"]:
        return "string"
    if path == ["device", "allowMultipleAllocations"]:
        return "bool"
    if len(path) == 4 and path[:3] == ["device", "capacity", "[]"]:
        return QUANTITY
    _type(kids[0])
    return DYN


def _path(node: Tree | Token) -> list[str]:
    """``device.capacity["x"]`` -> ["device", "capacity", "[]"]; anything else is []."""
    while isinstance(node, Tree) and len(node.children) == 1 and str(node.data) in ("member", "primary"):
        node = node.children[0]
    if isinstance(node, Tree):
        if str(node.data) == "ident":
            return [str(node.children[0])]
        if str(node.data) == "member_dot":
            inner = _path(node.children[0])
            return inner + [str(node.children[1])] if inner else []
        if str(node.data) == "member_index":
            inner = _path(node.children[0])
            return inner + ["[]"] if inner else []
    return []


def _no_overload(function: str, *types: str) -> str:
    return f"found no matching overload for '{function}' applied to '({', '.join(types)})'"
