"""The verdict policy (``perfgate.model.verdict``): one table of what each verdict means and
does, and per exit code what the pull request shows. Checked here: the table is whole and
its values are ones GitHub and pytest know; the gate's exit code follows the rule over every
combination of verdicts; ``inconclusive = "fail"`` changes the status, the check run and the
pytest item but never the exit code; every renderer and adapter maps through it; and the
docs' verdict tables (docs/errors.md, and the README's exit codes) say what it says."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import pytest
from factories import ENV, make_result
from test_reports import baseline_for

from perfgate.adapters.pytest_items import is_setup_error, pytest_outcome
from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry, GateOutcome
from perfgate.gate.comment import CHECK_LINE, VERDICT_WORD, ReportContext, compose, consequence
from perfgate.gate.github import workflow_annotations
from perfgate.model.errors import EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION
from perfgate.model.verdict import (
    CHECK_CONCLUSIONS,
    EXIT_PRECEDENCE,
    INCONCLUSIVE_POLICIES,
    POLICY,
    PYTEST_OUTCOMES,
    RUN_POLICY,
    STATUS_STATES,
    Verdict,
    VerdictPolicy,
    gate_exit_code,
    run_policy,
)
from perfgate.report.html import CSS, VERDICT_CLASS
from perfgate.report.json_report import outcome_to_dict
from perfgate.report.markdown import ICON, render_markdown
from perfgate.report.terminal import gate_table
from perfgate.store.baselines import Lookup

ROOT = Path(__file__).resolve().parents[1]
FAIL = GateConfig(inconclusive="fail")
STRICT = GateConfig(fail_on_missing_baseline=True)
BOTH = GateConfig(inconclusive="fail", fail_on_missing_baseline=True)


# --- the table ------------------------------------------------------------------------------------

def test_every_verdict_has_one_whole_policy() -> None:
    assert list(POLICY) == list(Verdict)
    for verdict, p in POLICY.items():
        assert isinstance(p, VerdictPolicy) and p.verdict is verdict
        assert p.meaning and "\n" not in p.meaning and p.words and p.icon
        assert p.exit_code in EXIT_PRECEDENCE and p.pytest in PYTEST_OUTCOMES
        assert f".{p.css_class} " in CSS + " ", p.css_class  # a class the HTML report styles
        assert p.notice in (None, "notice", "warning")
        assert (p.strict_when is None) == (p.strict_exit_code is None) == (p.strict_pytest is None)
    assert len({p.icon for p in POLICY.values()}) == len(POLICY)
    for code, r in RUN_POLICY.items():
        assert r.exit_code == code and r.state in STATUS_STATES and r.conclusion in CHECK_CONCLUSIONS
        assert r.check_line.startswith("**Check: ")
    assert set(RUN_POLICY) == set(EXIT_PRECEDENCE)


def test_the_settings_values_are_the_configs() -> None:
    from perfgate.analysis import decide

    assert tuple(getattr(decide, "INCONCLUSIVE_POLICIES", INCONCLUSIVE_POLICIES)) == INCONCLUSIVE_POLICIES
    assert GateConfig().inconclusive == "bound" == INCONCLUSIVE_POLICIES[0]
    assert FAIL.inconclusive == "fail"


def expected_exit(verdicts: set[Verdict], fail_on_missing_baseline: bool) -> int:
    """The rule, as the README and docs/errors.md state it."""
    if Verdict.REGRESSION in verdicts:
        return 1
    if verdicts & {Verdict.ERROR, Verdict.INCOMPARABLE, Verdict.TOO_NOISY} or (
            Verdict.NO_BASELINE in verdicts and fail_on_missing_baseline):
        return 2
    if Verdict.INCONCLUSIVE in verdicts:
        return 3
    return 0


def test_the_gates_exit_code_follows_the_rule_for_every_combination() -> None:
    for n in range(len(Verdict) + 1):
        for combination in itertools.combinations(Verdict, n):
            for config in (GateConfig(), FAIL, STRICT, BOTH):
                assert gate_exit_code(combination, config) == expected_exit(
                    set(combination), config.fail_on_missing_baseline), (combination, config)
    assert gate_exit_code([]) == EXIT_OK
    assert (EXIT_REGRESSION, EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK) == EXIT_PRECEDENCE


@pytest.mark.parametrize(("config", "state", "conclusion", "pytest_item", "fails"), [
    (GateConfig(), "success", "neutral", "skipped", False),
    (FAIL, "failure", "failure", "failed", True),
], ids=["pass", "fail"])
def test_inconclusive_is_visible_and_its_consequence_is_the_setting(config, state, conclusion, pytest_item,
                                                                     fails) -> None:
    p = POLICY[Verdict.INCONCLUSIVE]
    assert p.exit_contribution(config) == EXIT_INCONCLUSIVE  # scripts keep working
    assert (p.run(config).state, p.conclusion(config), p.pytest_outcome(config), p.fails(config)) == (
        state, conclusion, pytest_item, fails)
    run = run_policy(EXIT_INCONCLUSIVE, config)
    assert (run.headline, run.word, run.state, run.conclusion) == ("inconclusive", "inconclusive", state, conclusion)
    assert run.check_line.startswith("**Check: fails**" if fails else "**Check: neutral**")
    assert p.annotation(config) == ("error" if fails else "warning")


def test_a_missing_baseline_fails_only_with_fail_on_missing_baseline() -> None:
    p = POLICY[Verdict.NO_BASELINE]
    assert (p.exit_contribution(), p.run().state, p.conclusion(), p.pytest_outcome()) == (
        EXIT_OK, "success", "success", "skipped")
    assert (p.exit_contribution(STRICT), p.run(STRICT).state, p.conclusion(STRICT), p.pytest_outcome(STRICT)) == (
        EXIT_ERROR, "error", "failure", "error")
    assert p.exit_contribution(FAIL) == EXIT_OK  # the other setting leaves it alone


def test_the_other_verdicts_do_not_depend_on_the_settings() -> None:
    for verdict, p in POLICY.items():
        if verdict in (Verdict.INCONCLUSIVE, Verdict.NO_BASELINE):
            continue
        values = {(p.exit_contribution(c), p.run(c).state, p.conclusion(c), p.pytest_outcome(c))
                  for c in (None, GateConfig(), FAIL, STRICT, BOTH)}
        assert len(values) == 1, verdict


def test_the_old_names_are_the_policys_with_the_default_setting() -> None:
    assert VERDICT_WORD == {0: "pass", 1: "regression", 2: "error", 3: "inconclusive"}
    assert {c: p.state for c, p in RUN_POLICY.items()} == {0: "success", 1: "failure", 2: "error", 3: "success"}
    assert CHECK_LINE[EXIT_OK] == "**Check: passes.**"
    assert ICON == {v: POLICY[v].icon for v in Verdict} and VERDICT_CLASS == {v: POLICY[v].css_class for v in Verdict}


# --- the renderers and adapters map through it -----------------------------------------------------

def outcome_of(*verdicts: Verdict, config: GateConfig | None = None) -> GateOutcome:
    """A real comparison's outcome, its workloads relabelled with ``verdicts``."""
    config = config or GateConfig()
    entry = Entry("w", make_result("w", seed=1), Lookup(baseline_for("w", [2, 3]), Path("baselines") / ENV.key() / "w.json"))
    outcome = compare([entry], config)
    (c,) = outcome.comparisons
    return dataclasses.replace(outcome, comparisons=tuple(
        dataclasses.replace(c, workload=f"w{i}", verdict=v, reason=f"reason {v.value}") for i, v in enumerate(verdicts)))


@pytest.mark.parametrize("config", [GateConfig(), FAIL], ids=["pass", "fail"])
def test_every_report_shows_an_inconclusive_gate_by_the_setting(config: GateConfig) -> None:
    outcome = outcome_of(Verdict.PASS, Verdict.INCONCLUSIVE, config=config)
    shown = run_policy(EXIT_INCONCLUSIVE, config)
    assert outcome.exit_code == EXIT_INCONCLUSIVE and outcome.headline.startswith("perfgate: inconclusive (")
    assert consequence(outcome) == shown
    comment = compose(outcome, ReportContext(base_ref="main", base_sha="b" * 40), None)
    assert shown.check_line in comment
    markdown = render_markdown(outcome)
    assert f"- {POLICY[Verdict.INCONCLUSIVE].icon} **w1** — **INCONCLUSIVE**" in markdown
    terminal = gate_table(outcome)
    assert shown.check_line.replace("**", "").replace("`", "") in terminal
    data = outcome_to_dict(outcome)
    assert data["exit_code"] == 3
    assert data["check"] == {"state": shown.state, "conclusion": shown.conclusion, "fails": shown.fails}
    assert [w["fails_check"] for w in data["workloads"]] == [False, config.inconclusive == "fail"]
    kind = "error" if config.inconclusive == "fail" else "warning"
    (line,) = workflow_annotations(outcome)
    # the verdict line's deciding fact, escaped as a workflow command, not the whole reason
    fact = outcome.comparisons[1].headline.replace("%", "%25")
    assert line == f"::{kind} title=perfgate INCONCLUSIVE%3A w1::{fact}" and len(fact) <= 200


def test_the_annotations_follow_the_policy() -> None:
    outcome = outcome_of(*Verdict)
    kinds = [line.split(" ", 1)[0] for line in workflow_annotations(outcome)]
    assert kinds == ["::error", "::warning", "::error", "::notice", "::error", "::warning", "::error"]
    assert "(not judged; it does not fail the gate)" in workflow_annotations(outcome)[5]
    strict = outcome_of(Verdict.NO_BASELINE, config=STRICT)
    assert workflow_annotations(strict) == [f"::error title=perfgate NO_BASELINE%3A w0::{strict.comparisons[0].headline}"]
    assert workflow_annotations(outcome, levels=("error",)) == [a for a in workflow_annotations(outcome)
                                                                if a.startswith("::error")]


@pytest.mark.parametrize("config", [GateConfig(), FAIL, STRICT, BOTH], ids=["defaults", "fail", "strict", "both"])
def test_the_pytest_item_maps_through_the_policy(config: GateConfig) -> None:
    for verdict, c in zip(Verdict, outcome_of(*Verdict, config=config).comparisons, strict=True):
        assert pytest_outcome(c, config) == POLICY[verdict].pytest_outcome(config)
        assert is_setup_error(c, config) == (POLICY[verdict].pytest_outcome(config) == "error")
    (inconclusive,) = outcome_of(Verdict.INCONCLUSIVE).comparisons
    assert pytest_outcome(inconclusive, FAIL) == "failed" and pytest_outcome(inconclusive, GateConfig()) == "skipped"


# --- the docs say what the policy says --------------------------------------------------------------

def table_after(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header row starts with ``header``."""
    lines = [line.strip() for line in text.splitlines()]  # a table in a list item is indented
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def cell(default: object, strict: object, when: str | None) -> str:
    """A cell of the docs: the default's value, and the strict one "with" its setting when it differs."""
    return str(default) if strict == default or when is None else f"{default}; {strict} with `{when}`"


def test_the_verdict_table_in_errors_md_is_the_policy() -> None:
    rows = table_after((ROOT / "docs" / "errors.md").read_text(), "| verdict | meaning | exit code |")
    assert [row[0] for row in rows] == [f"**{v.value}**" for v in Verdict]
    strict = {Verdict.INCONCLUSIVE: FAIL, Verdict.NO_BASELINE: STRICT}
    for row, (verdict, p) in zip(rows, POLICY.items(), strict=True):
        rules = strict.get(verdict)
        expected = [
            f"**{verdict.value}**", p.meaning,
            cell(p.exit_contribution(), p.exit_contribution(rules), p.strict_when),
            cell(p.run().state, p.run(rules).state, p.strict_when),
            cell(p.conclusion(), p.conclusion(rules), p.strict_when),
            cell(p.pytest_outcome(), p.pytest_outcome(rules), p.strict_when),
        ]
        assert row == expected, verdict


def test_the_exit_code_table_in_errors_md_is_the_run_policy() -> None:
    rows = table_after((ROOT / "docs" / "errors.md").read_text(), "| exit code | headline |")
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    for row in rows:
        code = int(row[0])
        default, failing = run_policy(code), run_policy(code, FAIL)
        assert row == [str(code), default.headline, default.word, cell(default.state, failing.state, 'inconclusive = "fail"'),
                       cell(default.conclusion, failing.conclusion, 'inconclusive = "fail"')], code


def test_the_readme_table_gives_each_verdict_its_exit_code() -> None:
    rows = table_after((ROOT / "README.md").read_text(), "| verdict | when | exit code |")
    codes = {row[0].strip("*"): row[-1] for row in rows}
    assert set(codes) == {v.value for v in Verdict}
    for verdict, p in POLICY.items():
        strict = p.exit_contribution(STRICT)
        expected = str(p.exit_code) if strict == p.exit_code else f"{p.exit_code}, or {strict} with `--fail-on-missing-baseline`"
        assert codes[verdict.value] == expected, verdict


def test_ci_md_says_what_an_inconclusive_gate_shows_under_each_setting() -> None:
    text = (ROOT / "docs" / "ci.md").read_text()
    rows = table_after(text, "| exit code | meaning | `perfgate` status | `perfgate verdict` check run |")
    by_code = {int(row[0]): row for row in rows}
    assert sorted(by_code) == [0, 1, 2, 3]
    for code, row in by_code.items():
        default, failing = run_policy(code), run_policy(code, FAIL)
        assert row[2].startswith(default.state) and row[3].startswith(default.conclusion), code
        if failing != default:
            assert f"{failing.state} with `inconclusive = \"fail\"`" in row[2]
            assert f"{failing.conclusion} with `inconclusive = \"fail\"`" in row[3]
    assert re.search(r"require[^.]*`perfgate verdict`", text.replace("\n", " "))


def test_the_policy_says_which_verdicts_judged_the_workload() -> None:
    judged = {v for v, p in POLICY.items() if p.judged}
    assert judged == {Verdict.REGRESSION, Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.TOO_NOISY, Verdict.IMPROVED}
    # a verdict not judged never passes a pytest item nor decides a bisect step
    assert all(POLICY[v].pytest != "passed" and POLICY[v].bisect == "error" for v in set(Verdict) - judged)


def test_the_policy_says_what_a_bisect_step_makes_of_each_verdict() -> None:
    from perfgate.gate.bisect import BAD_VERDICTS, GOOD_VERDICTS
    from perfgate.model.verdict import BISECT_STEPS, POLICY, Verdict

    assert {p.bisect for p in POLICY.values()} <= set(BISECT_STEPS)
    steps = {v: POLICY[v].bisect for v in Verdict}
    assert steps == {Verdict.REGRESSION: "slow", Verdict.PASS: "fast", Verdict.IMPROVED: "fast",
                     Verdict.INCONCLUSIVE: "undecided", Verdict.TOO_NOISY: "undecided", Verdict.INCOMPARABLE: "error",
                     Verdict.NO_BASELINE: "error", Verdict.ERROR: "error"}
    assert BAD_VERDICTS == {Verdict.REGRESSION} and GOOD_VERDICTS == {Verdict.PASS, Verdict.IMPROVED}
