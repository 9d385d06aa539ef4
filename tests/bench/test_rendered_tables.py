"""The README's verdict table and docs/results.md's summary tables hold what
``benchmarks/render_tables.py`` renders from the saved reports, and nothing else."""

from __future__ import annotations

import doctest
import json
import shutil

import pytest

from tests.support import REPO_ROOT
from tests.support.scripts import benchmark_module


@pytest.fixture(scope="module")
def render_tables():
    with benchmark_module("render_tables") as module:
        yield module


@pytest.fixture()
def copied_reports(render_tables, tmp_path):
    """The reports every table reads, copied, so that a test can edit one."""
    for name in render_tables.report_names():
        shutil.copy(render_tables.RESULTS / name, tmp_path / name)
    return tmp_path


def _edit(folder, name, framework, mode, field, change):
    path = folder / name
    report = json.loads(path.read_text())
    row = next(r for r in report["rows"] if r["framework"] == framework and r["mode"] == mode)
    row[field] = change(row[field])
    path.write_text(json.dumps(report))


def test_every_table_in_the_markdown_is_what_its_reports_render(render_tables):
    assert len(render_tables.TABLES) >= 6  # the verdict table and results.md's bench and adaptive tables
    assert render_tables.differing() == []


def test_control_one_edited_number_in_a_report_is_caught(render_tables, copied_reports):
    """Control: the same check, reading copies of the reports with one number changed, names the
    tables that show it, and only those."""
    load = render_tables.load_from(copied_reports)
    assert render_tables.differing(load=load) == []  # the copies alone change nothing
    _edit(copied_reports, "bench_demo.json", "hf", "lossy-fixed", "full_equivalent_per_token", lambda v: v + 0.01)
    assert render_tables.differing(load=render_tables.load_from(copied_reports)) == [
        "README.md: verdict", "docs/results.md: bench-demo", "docs/paper.md: paper-measured"]


def test_control_an_edited_cell_in_the_markdown_is_caught(render_tables, tmp_path):
    """Control: a copy of the Markdown files with one table cell changed differs."""
    for name in {path for path, _ in render_tables.TABLES.values()}:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    results = tmp_path / "docs" / "results.md"
    text = results.read_text()
    row = "| demo | EAGLE | 1.000 | 1.000 |"
    assert text.count(row) == 1
    results.write_text(text.replace(row, "| demo | EAGLE | 1.000 | 0.990 |"))
    load = render_tables.load_from(render_tables.RESULTS)
    assert render_tables.differing(tmp_path, load) == ["docs/results.md: adaptive"]


def test_a_row_priced_the_older_way_is_marked_and_read_from_one_report(render_tables, copied_reports):
    """A report priced before each pass was priced by what it fed (its rows carry no one-token pass
    count) is marked in its README row, with the footnote, and the row still quotes that report's
    own cells and verdict, not repriced ones. The saved SmolLM2 reports are priced the current way:
    no mark. Control: the distilled-drafter report with its one-token counts removed gains the mark,
    and the prompt-lookup row does not."""
    def spec_bench_rows():
        table = render_tables.render_verdict(render_tables.load_from(copied_reports))
        lines = [line for line in table.splitlines() if "Spec-Bench" in line]
        drafter, = [line for line in lines if "distilled drafter" in line.split("|")[1]]
        lookup, = [line for line in lines if "prompt lookup" in line.split("|")[1]]
        return table, drafter, lookup

    table, drafter, lookup = spec_bench_rows()
    assert "(older pricing*)" not in table and "Priced before each target pass" not in table

    path = copied_reports / "bench_smollm2_drafter_spec_bench.json"
    report = json.loads(path.read_text())
    for row in report["rows"]:
        del row["single_passes_per_token"]
    path.write_text(json.dumps(report))
    marked_table, marked_drafter, marked_lookup = spec_bench_rows()
    assert "(older pricing*)" in marked_drafter and "(older pricing*)" not in marked_lookup
    assert "Priced before each target pass" in marked_table
    assert marked_drafter.replace(" (older pricing*)", "") == drafter and marked_lookup == lookup


def test_a_renamed_row_is_named_when_missing(render_tables, copied_reports):
    """A source table naming a row a report lacks (say, after a rename) fails with the report and its rows."""
    table = render_tables.BenchTable((("bench_demo.json", ("hf/lossless-adaptive",)),), ("row", "feq/tok"))
    with pytest.raises(KeyError, match="bench_demo.json has no row 'hf/lossless-adaptive'"):
        render_tables.render_bench(table, render_tables.load_from(copied_reports))


def test_markers_must_be_there_once(render_tables):
    start, end = render_tables.markers("x")
    assert render_tables.written(f"a\n{start}\n| t |\n{end}\nb", "x") == "| t |"
    for broken in ("no markers", f"{start}\n{start}\n{end}", f"{end}\n{start}"):
        with pytest.raises(ValueError, match="markers of table 'x'"):
            render_tables.written(broken, "x")


def test_verdict_summaries(render_tables):
    failed, attempted = doctest.testmod(render_tables)
    assert attempted >= 2 and failed == 0


def test_paper_conditions_agree_with_the_products_own_pricing(render_tables):
    """The tokens per cycle docs/paper.md says the tier needs for 2.5x AR, priced back through the
    bench's own pricing (:func:`viasd_adapt.bench.costs.full_equivalent`) with the same cost model
    and a mask that skips 45% of 20 layers from half depth on, give exactly 1/2.5 of AR's cost; and
    untiered SD at its stated tokens per cycle costs what the tier costs. Control: one token per
    cycle fewer misses the speed-up."""
    from viasd_adapt.bench.costs import PassCounts, full_equivalent
    from viasd_adapt.bench.projection import load_cost_model
    from viasd_adapt.config.mask import RoutingMask

    model = load_cost_model(render_tables.PROJECTION_COSTS)
    mask = RoutingMask.from_skipped(20, range(10, 19))  # 9 of 20 skipped (r = 0.45), the first at half depth
    costs = model.forward_costs(mask, render_tables.PAPER_GAMMA + 1)
    gamma = render_tables.PAPER_GAMMA

    for escalation in render_tables.ESCALATION_RATES:
        need = render_tables.paper_conditions(model, escalation)

        def tier_cost(tokens: float) -> float:
            per_cycle = PassCounts(draft=gamma, slim=1.0, full=escalation, resumed=escalation, single=0.0)
            return full_equivalent(costs, PassCounts(**{k: v / tokens for k, v in vars(per_cycle).items()}))

        ar = full_equivalent(costs, PassCounts(single=1.0))
        tokens = need["tokens_for_2.5x_ar"]
        assert tier_cost(tokens) == pytest.approx(ar / 2.5, rel=2e-3)
        assert tier_cost(tokens - 1) > ar / 2.5 * 1.1  # control
        sd_tokens = tokens / need["tokens_over_sd_for_1.1x"]
        sd = full_equivalent(costs, PassCounts(draft=gamma / sd_tokens, full=1.0 / sd_tokens))
        assert sd == pytest.approx(1.1 * tier_cost(tokens), rel=2e-3)
