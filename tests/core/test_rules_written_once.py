"""Each rule of the tier is written once, in viasd_adapt/core/rules.py.

What counts as *writing a rule* (read off the source with :mod:`ast`):

* **a function named for a rule**: a rule hook (``viasd_gate1_accept_prob`` ...), its name without
  the ``viasd_`` prefix, or one of the rule functions of the core (``tolerant_accept_prob``,
  ``top_relative_accept`` ...). Outside core/rules.py only a plugin may define one, as a method
  marked ``@hookimpl`` (it answers the hook; what it computes is checked by the next point);
* **a tolerant comparison**: a comparison (``>=``, ``<``, ``torch.ge(...)`` ...) one of whose sides
  holds a tolerance factor, ``1 - a``, ``log(1 - a)`` or ``log1p(-a)`` where ``a`` names a rule's
  tolerance (``alpha``, ``alpha1``, ``alpha2``, ``lenience``, ``tolerance``, ``escalation_tolerance``,
  bare or as an attribute), or a name bound to one in the same or an enclosing function.
  Gate 1 (``u(x) >= (1 - alpha1) p(x)``), the router (``max u >= 1 - alpha2``), the lenient rule
  (``q(x) >= (1 - a) p(x)``) and the tolerant escalation all have that form, in probability or in
  log space; the audit's effective distribution ``min(p, v / (1 - a))`` compares nothing and is not
  a decision;
* **an adapter calling a rule function directly**: adapters import nothing from core/rules.py but
  its table, ``rule_for``; they reach every rule through a rules object (the verify step's), so
  plugins apply to them;
* **asking an acceptance hook by name** (``rules.viasd_gate1_accept_prob(...)`` ...): which rule a
  mode applies where is the table ``rule_for`` of core/rules.py, and each acceptance rule is asked
  through it (the cycle, EAGLE's path choice, the audit, the vLLM plugin). Only a plugin's own
  hook method (marked ``@hookimpl``) may call another rules object's hook by name (a plugin that
  defers to the built-in rules).

The vLLM plugin (serving/lenient.py) and the search objective (search/objective.py) must take their
rules from the core. Each checker has a control that feeds it a snippet breaking the rule.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.support import REPO_ROOT
from viasd_adapt.core.rules import TierRules

LIBRARY = [REPO_ROOT / "viasd_adapt", REPO_ROOT / "adapters"]
RULES_MODULE = "viasd_adapt/core/rules.py"
RULE_HOOKS = {name for name in vars(TierRules) if name.startswith("viasd_")}
RULE_FUNCTION_NAMES = (
    RULE_HOOKS
    | {name.removeprefix("viasd_") for name in RULE_HOOKS}
    | {"tolerant_accept_prob", "top_relative_accept"}
)
ACCEPT_HOOKS = {name for name in RULE_HOOKS if name.endswith("_accept_prob")}
#: what an adapter may import from core/rules.py: the table, not a rule
ADAPTER_MAY_IMPORT = {"rule_for"}
COMPARISON_CALLS = {"ge", "gt", "le", "lt", "greater_equal", "greater", "less_equal", "less"}
#: the names a rule's tolerance goes by (TierSettings.alpha1, alpha2, lenience, escalation_tolerance,
#: and the ``alpha`` / ``tolerance`` parameters of the rule functions)
TOLERANCE = re.compile(r"alpha\d*|lenience|(escalation_)?tolerance")


def library_sources() -> dict[str, str]:
    files = sorted(p for root in LIBRARY for p in root.rglob("*.py"))
    assert len(files) > 50  # the walk found the library
    return {str(p.relative_to(REPO_ROOT)): p.read_text() for p in files}


# ============================================================================== the checkers


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 1


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _names_a_tolerance(node: ast.AST) -> bool:
    """Whether an expression mentions a rule's tolerance (``alpha1``, ``settings.lenience`` ...)."""
    return any(TOLERANCE.fullmatch(sub.id if isinstance(sub, ast.Name) else sub.attr)
               for sub in ast.walk(node) if isinstance(sub, (ast.Name, ast.Attribute)))


def _is_tolerance_factor(node: ast.AST) -> bool:
    """``1 - alpha`` (which covers ``log(1 - alpha)``) or ``log1p(-alpha)``, for a rule's tolerance."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _is_one(node.left):
        return _names_a_tolerance(node.right)
    return (isinstance(node, ast.Call) and _call_name(node) == "log1p" and len(node.args) == 1
            and isinstance(node.args[0], ast.UnaryOp) and isinstance(node.args[0].op, ast.USub)
            and _names_a_tolerance(node.args[0].operand))


def _holds_tolerance(node: ast.AST, bound: set[str]) -> bool:
    return any(_is_tolerance_factor(sub) or (isinstance(sub, ast.Name) and sub.id in bound) for sub in ast.walk(node))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _own_nodes(scope: ast.AST):
    """The nodes of ``scope`` outside the functions, lambdas and classes nested in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _bound_tolerances(nodes: list[ast.AST], inherited: set[str]) -> set[str]:
    """Names bound to an expression holding a tolerance factor (followed through chains of names)."""
    bound = set(inherited)
    assigns = [n for n in nodes if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr))]
    changed = True
    while changed:
        changed = False
        for node in assigns:
            if node.value is None or not _holds_tolerance(node.value, bound):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in (n for target in targets for n in ast.walk(target)):
                if isinstance(name, ast.Name) and name.id not in bound:
                    bound.add(name.id)
                    changed = True
    return bound


def _comparison_sides(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Compare) and any(isinstance(op, (ast.GtE, ast.Gt, ast.LtE, ast.Lt)) for op in node.ops):
        return [node.left, *node.comparators]
    if isinstance(node, ast.Call) and _call_name(node) in COMPARISON_CALLS:
        receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
        return [*node.args, *(k.value for k in node.keywords), *receiver]
    return []


def tolerant_comparisons(source: str) -> list[str]:
    """Every comparison in ``source`` with a tolerance factor on one side (module docstring). A name
    bound to a tolerance factor counts in its scope and the scopes nested in it."""
    found = []

    def visit(scope: ast.AST, inherited: set[str]) -> None:
        nodes = list(_own_nodes(scope))
        bound = _bound_tolerances(nodes, inherited)
        for node in nodes:
            if any(_holds_tolerance(side, bound) for side in _comparison_sides(node)):
                found.append(ast.unparse(node))
            if isinstance(node, _SCOPES):
                visit(node, bound)

    visit(ast.parse(source), set())
    return sorted(set(found))


def _is_hookimpl(decorator: ast.AST) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target).split(".")[-1] == "hookimpl"


def functions_named_for_rules(source: str) -> list[str]:
    """Functions named for a rule, other than plugin methods marked ``@hookimpl``."""
    return sorted(
        node.name for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in RULE_FUNCTION_NAMES
        and not any(_is_hookimpl(d) for d in node.decorator_list)
    )


def rule_imports(source: str) -> list[str]:
    """Names imported from viasd_adapt.core.rules (or the module itself)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "viasd_adapt.core.rules":
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "viasd_adapt.core":
            found += [alias.name for alias in node.names if alias.name == "rules"]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name == "viasd_adapt.core.rules"]
    return found


def accept_hooks_asked_by_name(source: str) -> list[str]:
    """Acceptance hooks called by name (``x.viasd_..._accept_prob(...)``) outside ``@hookimpl`` methods."""
    found = []

    def visit(node: ast.AST, in_plugin: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_plugin = in_plugin or any(_is_hookimpl(d) for d in node.decorator_list)
        if (not in_plugin and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ACCEPT_HOOKS):
            found.append(node.func.attr)
        for child in ast.iter_child_nodes(node):
            visit(child, in_plugin)

    visit(ast.parse(source), False)
    return sorted(found)


def rule_definitions(path: str, source: str) -> list[str]:
    """Everything in one file that writes a rule (module docstring); core/rules.py may."""
    if path == RULES_MODULE:
        return []
    found = [f"def {name}" for name in functions_named_for_rules(source)]
    found += [f"compares {text}" for text in tolerant_comparisons(source)]
    found += [f"asks {name} by name, not through rule_for" for name in accept_hooks_asked_by_name(source)]
    if path.startswith("adapters/"):
        found += [f"imports {name} from the rules module" for name in rule_imports(source)
                  if name not in ADAPTER_MAY_IMPORT]
    return found


# ============================================================================== controls


REDEFINITIONS = {
    "a lenient rule of its own name": (
        "def lenient_accept_prob(tokens, p, q, lenience, greedy):\n"
        "    return top_relative_accept(tokens, q, lenience) if greedy else tolerant_accept_prob(tokens, p, q, lenience, False)\n"
    ),
    "the lenient rule in log space, through a bound threshold": (
        "import math\n"
        "def mask(logits, ids, lenience):\n"
        "    regret = logits.max(-1).values - logits.gather(-1, ids[:, None]).squeeze(-1)\n"
        "    threshold = -math.log1p(-lenience)\n"
        "    return regret <= threshold\n"
    ),
    "gate 1 and the router in log space": (
        "import math\n"
        "def walk(logp_slim, logp_draft, x, settings):\n"
        "    accept = logp_slim.gather(-1, x) >= math.log(1 - settings.alpha1) + logp_draft.gather(-1, x)\n"
        "    confident = logp_slim.max(-1).values >= math.log(1 - settings.alpha2)\n"
        "    return accept, confident\n"
    ),
    "gate 1 inside a plugin method": (
        "class Mine:\n"
        "    @hookimpl\n"
        "    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):\n"
        "        scaled = (1.0 - settings.alpha1) * p.gather(-1, tokens[:, None])\n"
        "        return (u.gather(-1, tokens[:, None]) >= scaled).float()\n"
    ),
    "the router as a method call": "def resolves(u, settings):\n    return u.max(-1).values.ge(1 - settings.alpha2)\n",
    "escalation as a torch call, its threshold bound outside the lambda": (
        "import torch\n"
        "def gate(tolerance):\n"
        "    factor = 1.0 - tolerance\n"
        "    return lambda v, b: torch.ge(v, factor * b)\n"
    ),
    "a router of its own name": "def slim_resolves(confidence, settings):\n    return confidence > 0.5\n",
    "a mode-to-rule table of its own": (
        "def first_rule(rules, mode, settings, greedy):\n"
        "    if mode == 'lenient':\n"
        "        return lambda t, p, q: rules.viasd_lenient_accept_prob(tokens=t, p=p, q=q, settings=settings, greedy=greedy)\n"
        "    return lambda t, p, u: rules.viasd_gate1_accept_prob(tokens=t, p=p, u=u, settings=settings, greedy=greedy)\n"
    ),
}


@pytest.mark.parametrize("snippet", list(REDEFINITIONS.values()), ids=list(REDEFINITIONS))
def test_the_checker_catches_a_second_definition(snippet):
    assert rule_definitions("viasd_adapt/serving/copy.py", snippet)


def test_the_checker_catches_an_adapter_calling_a_rule_function():
    snippet = ("from viasd_adapt.core.rules import lossless_accept_prob\n"
               "gate = lambda tokens, p, u: lossless_accept_prob(tokens, p, u[:-1], True)\n")
    assert rule_definitions("adapters/eagle/decide.py", snippet) == ["imports lossless_accept_prob from the rules module"]


def test_the_checker_lets_an_adapter_ask_the_table():
    snippet = ("from viasd_adapt.core.rules import rule_for\n"
               "gate = lambda rules, t, p, u, s: rule_for(s.mode).drafts.accept_prob(rules, t, p, u, s, True)\n")
    assert rule_definitions("adapters/eagle/decide.py", snippet) == []


def test_the_checker_passes_what_is_not_a_rule():
    """Asking the table, a plugin that defers to the built-in rules, the audit's effective
    distribution and comparisons without a tolerance factor are not definitions."""
    snippet = (
        "import torch\n"
        "class Plugin:\n"
        "    @hookimpl\n"
        "    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):\n"
        "        builtin = BUILTIN_RULES.viasd_gate1_accept_prob(tokens=tokens, p=p, u=u, settings=settings, greedy=greedy)\n"
        "        return torch.maximum(builtin, (u.argmax(-1) == tokens).float())\n"
        "def gate_mass(proposer, verifier, alpha):\n"
        "    return torch.minimum(proposer, verifier / (1.0 - alpha))\n"
        "def decide(rules, tokens, p, u, settings):\n"
        "    passed = rule_for(settings.mode).drafts.accept_prob(rules, tokens, p, u, settings, True) > 0.5\n"
        "    return passed, p > 0, len(tokens) >= 1\n"
    )
    assert rule_definitions("viasd_adapt/search/objective.py", snippet) == []


def test_the_rules_module_is_found_and_holds_every_rule():
    """The checker's own sanity: core/rules.py does have the functions and comparisons it looks for
    (so a checker that matches nothing anywhere would fail here)."""
    source = (REPO_ROOT / RULES_MODULE).read_text()
    assert set(functions_named_for_rules(source)) >= {"tolerant_accept_prob", "top_relative_accept"}
    assert len(tolerant_comparisons(source)) >= 3  # tolerant, top-relative, the router
    assert rule_definitions(RULES_MODULE, source) == []


# ============================================================================== the library


def test_no_rule_is_written_twice():
    found = {path: hits for path, source in library_sources().items() if (hits := rule_definitions(path, source))}
    assert found == {}, "a rule of the tier is written outside viasd_adapt/core/rules.py"


@pytest.mark.parametrize("path", ["viasd_adapt/serving/lenient.py", "viasd_adapt/search/objective.py"])
def test_serving_and_search_take_their_rules_from_the_core(path):
    assert rule_imports((REPO_ROOT / path).read_text())
