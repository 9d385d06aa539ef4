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
* **an adapter calling a rule function directly**: adapters import nothing from core/rules.py; they
  reach every rule through a rules object (the verify step's), so plugins apply to them.

The vLLM plugin (serving/lenient.py) and the search objective (search/objective.py) must take their
rules from the core. Each checker has a control that feeds it a snippet breaking the rule.
"""

from __future__ import annotations

import ast
import re

import pytest
import torch

from tests.support import REPO_ROOT
from viasd_adapt.core.rules import (
    TierRules,
    top_relative_accept,
    top_relative_log_accept,
)

LIBRARY = [REPO_ROOT / "viasd_adapt", REPO_ROOT / "adapters"]
RULES_MODULE = "viasd_adapt/core/rules.py"
RULE_HOOKS = {name for name in vars(TierRules) if name.startswith("viasd_")}
RULE_FUNCTION_NAMES = (
    RULE_HOOKS
    | {name.removeprefix("viasd_") for name in RULE_HOOKS}
    | {"tolerant_accept_prob", "top_relative_accept", "top_relative_log_accept"}
)
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


def rule_definitions(path: str, source: str) -> list[str]:
    """Everything in one file that writes a rule (module docstring); core/rules.py may."""
    if path == RULES_MODULE:
        return []
    found = [f"def {name}" for name in functions_named_for_rules(source)]
    found += [f"compares {text}" for text in tolerant_comparisons(source)]
    if path.startswith("adapters/"):
        found += [f"imports {name} from the rules module" for name in rule_imports(source)]
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
}


@pytest.mark.parametrize("snippet", list(REDEFINITIONS.values()), ids=list(REDEFINITIONS))
def test_the_checker_catches_a_second_definition(snippet):
    assert rule_definitions("viasd_adapt/serving/copy.py", snippet)


def test_the_checker_catches_an_adapter_calling_a_rule_function():
    snippet = ("from viasd_adapt.core.rules import lossless_accept_prob\n"
               "gate = lambda tokens, p, u: lossless_accept_prob(tokens, p, u[:-1], True)\n")
    assert rule_definitions("adapters/eagle/decide.py", snippet) == ["imports lossless_accept_prob from the rules module"]


def test_the_checker_passes_what_is_not_a_rule():
    """Asking a rules object, a plugin that defers to the built-in rules, the audit's effective
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
        "    passed = rules.viasd_gate1_accept_prob(tokens=tokens, p=p, u=u, settings=settings, greedy=True) > 0.5\n"
        "    return passed, p > 0, len(tokens) >= 1\n"
    )
    assert rule_definitions("viasd_adapt/search/objective.py", snippet) == []


def test_the_rules_module_is_found_and_holds_every_rule():
    """The checker's own sanity: core/rules.py does have the functions and comparisons it looks for
    (so a checker that matches nothing anywhere would fail here)."""
    source = (REPO_ROOT / RULES_MODULE).read_text()
    assert set(functions_named_for_rules(source)) >= {"tolerant_accept_prob", "top_relative_accept", "top_relative_log_accept"}
    assert len(tolerant_comparisons(source)) >= 4  # tolerant, top-relative (both forms), the router
    assert rule_definitions(RULES_MODULE, source) == []


# ============================================================================== the library


def test_no_rule_is_written_twice():
    found = {path: hits for path, source in library_sources().items() if (hits := rule_definitions(path, source))}
    assert found == {}, "a rule of the tier is written outside viasd_adapt/core/rules.py"


@pytest.mark.parametrize("path", ["viasd_adapt/serving/lenient.py", "viasd_adapt/search/objective.py"])
def test_serving_and_search_take_their_rules_from_the_core(path):
    assert rule_imports((REPO_ROOT / path).read_text())


# ============================================================================== the two forms agree


def test_the_log_space_form_agrees_with_the_probability_form():
    """:func:`top_relative_log_accept` on logits decides as :func:`top_relative_accept` on their
    softmax, everywhere but within rounding of the threshold."""
    generator = torch.Generator().manual_seed(0)
    compared = 0
    for alpha in (0.0, 0.05, 0.3, 0.5, 0.9):
        for scale in (0.5, 3.0, 12.0):
            logits = torch.randn(400, 64, generator=generator) * scale
            tokens = torch.randint(0, 64, (400,), generator=generator)
            tokens[::4] = logits[::4].argmax(-1)
            log_form = top_relative_log_accept(tokens, logits, alpha)
            prob_form = top_relative_accept(tokens, logits.softmax(-1), alpha).bool()
            margin = logits.gather(-1, tokens[:, None]).squeeze(-1) - logits.max(-1).values - torch.log1p(torch.tensor(-alpha))
            clear = (margin.abs() > 1e-4) | (margin == 0)  # 0: the argmax at alpha = 0, exact in both forms
            assert clear.float().mean() > 0.95
            assert log_form.dtype == torch.bool and log_form[clear].tolist() == prob_form[clear].tolist()
            assert prob_form.any() and not prob_form.all() or alpha == 0.0
            compared += int(clear.sum())
    assert compared > 5000
    # at alpha = 0 both accept exactly the argmax (rows without ties)
    logits = torch.randn(50, 10, generator=generator)
    argmax = logits.argmax(-1)
    assert top_relative_log_accept(argmax, logits, 0.0).all()
    assert not top_relative_log_accept((argmax + 1) % 10, logits, 0.0).any()
    assert not top_relative_accept((argmax + 1) % 10, logits.softmax(-1), 0.0).any()
