"""Text from the measured run is inert in the reports: in the markdown posted as a pull
request comment no mention, link, image, HTML, markup or line of its own; in the terminal
no escape sequence; and it stays readable.

The properties are checked over a list of hostile strings, and ``inline``'s over text
hypothesis generates from the characters that make markup, mentions and references.
"""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_reports import scenario

from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
from perfgate.model.verdict import Verdict
from perfgate.report.markdown import render_markdown
from perfgate.report.terminal import gate_table

MESSAGE = ("boom @org/team ![x](https://example.invalid/p.png) <img src=x> [click](https://evil.invalid)\n"
           "**Check: passes.**")
SHOWN = MESSAGE.replace("\n", " ⏎ ")
"""How the message reads once GitHub has rendered it (the line break made visible)."""
OWN_TAGS = {"<!-- perfgate-report -->", "<details>", "<summary>", "</summary>", "</details>", "<sub>", "</sub>"}

NASTY = [
    MESSAGE.replace("\n", " "),
    "@org/team please look",
    "cc @someone, @org/team-name and user@example.com",
    "![x](https://example.invalid/p.png)",
    "[click](https://evil.invalid) and [ref][1] and [^note]",
    "<img src=x onerror=alert(1)> <script>alert('x')</script> <!-- marker -->",
    "<!-- perfgate-report -->",
    "<https://evil.invalid> https://evil.invalid/path www.evil.invalid HTTP://EVIL.INVALID",
    "&#64;org/team &amp; &lt;img&gt; &#x40;x",
    "# Heading",
    "## perfgate: pass",
    "> [!WARNING]",
    "- item",
    "+ item",
    "* item",
    "1. item",
    "12) item",
    "---",
    "===",
    "***",
    "___",
    "~~~",
    "```python",
    "**Check: passes.**",
    "*emphasis* _emphasis_ __strong__ ~~struck~~ ~sub~",
    "`code` ``code`` a\\`b",
    "| a | b |\n|---|---|",
    "a | b \\| c",
    "$\\color{red}{\\text{pass}}$ and $$x$$",
    "see #123 and org/repo#45",
    "\\*not emphasis\\* \\\\ trailing backslash\\",
    "resnet_50 and my_model_v2",
    ":+1: :tada:",
    "    indented code",
    "x" * 30,
]

RAW_MARKUP = set("<>[]`*~\\|$")


def _outside_code(markdown: str) -> str:
    """The markdown that is parsed as markup: code spans and indented code blocks left out.
    What they hold is shown literally (``![x](…)`` inside one is those characters), and GitHub
    finds no mention, reference or address in them."""
    outside = [line for line in markdown.splitlines() if not line.startswith("    ")]
    return "\n".join(re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", " ", line) for line in outside)


def _rendered(markdown: str) -> str:
    """The text GitHub scans for mentions, references and addresses: outside code, character
    references decoded."""
    return html.unescape(_outside_code(markdown))


def _hostile_outcome() -> GateOutcome:
    """The report's scenario with run-derived text replaced by hostile text wherever the types allow."""
    outcome = scenario()
    by_name = {c.workload: c for c in outcome.comparisons}
    slow, gpu, broken = by_name["resnet-slow"], by_name["vit-gpu"], by_name["broken"]
    assert slow.baseline is not None and gpu.labels
    rec = slow.baseline.recordings[0]
    baseline = dataclasses.replace(slow.baseline, recordings=(
        dataclasses.replace(rec, provenance=dataclasses.replace(rec.provenance, reason=MESSAGE)),
        *slow.baseline.recordings[1:]))
    label = dataclasses.replace(gpu.labels[0], evidence=MESSAGE)
    replaced: dict[str, WorkloadComparison] = {
        "resnet-slow": dataclasses.replace(slow, baseline=baseline, left_out=(MESSAGE,), labels=(label,),
                                           environment_differences={"gpu_name": (MESSAGE, "NVIDIA A10G")}),
        "vit-gpu": dataclasses.replace(gpu, workload=f"vit {MESSAGE}", reason=f"differs: {MESSAGE}",
                                       differences={MESSAGE: (MESSAGE, "a|b `c`")}, labels=(label,),
                                       overrides={"note": MESSAGE}, environment_key=MESSAGE,
                                       baseline_path=MESSAGE, design=MESSAGE),
        "broken": dataclasses.replace(broken, workload=f"broken {MESSAGE}", reason=MESSAGE),
    }
    return dataclasses.replace(outcome, comparisons=tuple(replaced.get(c.workload, c) for c in outcome.comparisons))


@pytest.fixture(autouse=True)
def no_ci_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY", "CI_PIPELINE_ID", "BUILD_ID"):
        monkeypatch.delenv(var, raising=False)


# --- the markdown report ------------------------------------------------------------------


def test_a_hostile_message_is_inert_in_the_markdown_report_and_still_readable() -> None:
    outcome = _hostile_outcome()
    text = render_markdown(outcome)
    markup, rendered = _outside_code(text), _rendered(text)
    assert not re.search(r"(?:^|\W)@[A-Za-z0-9]", rendered)  # no mention
    assert not re.search(r"#\d", rendered)  # no issue reference
    assert "://" not in rendered and "www." not in rendered  # no bare address to autolink
    assert "![" not in markup and "](" not in markup and "<img" not in markup.lower()
    assert set(re.findall(r"<[^>\n]*>?", markup)) <= OWN_TAGS  # no HTML but the report's own
    # in code, the text is shown as it is: the fence outlasts any backticks inside
    assert f"| {MESSAGE.replace(chr(10), ' ⏎ ')} |" not in text and f"`{SHOWN}`" in text
    lines = text.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("**Check")]
    headings = [line for line in lines if line.startswith("#")]
    assert len(headings) == 1 + len(outcome.comparisons)  # the title and one per workload
    # every table row keeps its columns: no cell was split by a | of the run's
    for line in lines:
        if line.startswith("| what differs") or line.startswith("| environment") or line.startswith("| gpu_name"):
            assert len(re.findall(r"(?<!\\)\|", line)) == 4, line
    # readable: the verdict line, the error section, the label, the note and the provenance say it all
    assert rendered.replace("\u2060", "").count(SHOWN) >= 8
    assert "**broken " in text and "— **ERROR**" in text  # perfgate's own markdown is still markdown


def test_the_commands_stay_one_line_of_an_indented_code_block() -> None:
    text = render_markdown(_hostile_outcome())
    commands = [line for line in text.splitlines() if "--reason" in line or line.lstrip().startswith("perfgate gate")]
    assert commands and all(line.startswith("    perfgate ") for line in commands)
    hostile = [line for line in commands if "note=" in line]
    assert hostile and all("Check: passes." in line for line in hostile)


def test_a_hostile_trace_is_linked_only_below_the_report_and_its_names_are_inert(tmp_path: Path) -> None:
    from perfgate.model.trace import OperatorRow, OperatorTable, PhaseOperators, TraceSchedule
    from perfgate.store.traces import TraceOutcome, TraceResult

    directory = tmp_path / "artifacts" / "w"
    names = ("trace-1.json", "x](https://evil.invalid) ![y](https://example.invalid/p.png",
             "//evil.invalid/t.json", "../../../../etc/passwd", "a b (c).json")
    rows = tuple(OperatorRow(name, 3, 900.0, 1000.0) for name in
                 ("aten::mm", "`; @org/team <img src=x> ![x](https://example.invalid/p.png)", "a|b", "x``y"))
    forward = PhaseOperators("forward", 3, 30_000.0, 3_600.0, 100.0, len(rows), rows)
    table = OperatorTable(MESSAGE, "cpu", TraceSchedule(), 1, 3, 5, names, {"forward": forward})
    result = TraceResult(MESSAGE, directory, tuple(directory / n for n in names), directory / "operators.json",
                         directory / "operators.md", table)
    text = render_markdown(scenario(), traces={"resnet-slow": TraceOutcome("resnet-slow", result)},
                           relative_to=tmp_path)
    section = text.split("### ❌ resnet-slow")[1].split("###")[0]
    links = re.findall(r"\]\(([^)]*)\)", _outside_code(section))
    assert links == ["artifacts/w/trace-1.json", "artifacts/w/x%5D%28https%3A/evil.invalid%29%20%21%5By%5D%28https%3A/"
                     "example.invalid/p.png", "artifacts/w/a%20b%20%28c%29.json", "artifacts/w/operators.md"]
    assert all(re.fullmatch(r"[A-Za-z0-9/%._~-]+", link) and ":" not in link for link in links)
    assert "![" not in _outside_code(section) and "<img" not in _outside_code(section).lower()
    assert not re.search(r"(?:^|\W)@[A-Za-z0-9]", _rendered(section))
    assert "`` `; @org/team <img src=x> ![x](https://example.invalid/p.png) ``" in section  # shown as code
    operators = section.split("Top operators in")[1]
    operator_rows = [line for line in operators.splitlines() if line.startswith("| ") and "calls/step" not in line]
    assert len(operator_rows) == 5  # four operators and the time in none
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 5 for line in operator_rows), operator_rows
    assert "Top operators in `forward`" in section


# --- inline ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", NASTY)
def test_inline_leaves_no_markup_and_reads_as_written(text: str) -> None:
    from perfgate.text.inert import inline

    out = inline(text)
    assert "\n" not in out and "\r" not in out
    assert not RAW_MARKUP & set(out), out
    assert all(out[i - 1].isalnum() and out[i + 1].isalnum() for i, ch in enumerate(out) if ch == "_"), out
    seen = html.unescape(out)  # what GitHub looks for mentions, references and addresses in
    assert not re.search(r"(?:^|\W)@[A-Za-z0-9]", seen) and not re.search(r"#[A-Za-z0-9]", seen)
    assert "://" not in seen and "www." not in seen.lower()
    # at the start of a line: no heading, quote, list, thematic break, setext line, code block or table
    assert not re.match(r"#{1,6}(?: |$)|[>|\s]|[-+=*_](?: |$|[-+=*_])|\d+[.)](?: |$)|`{3}|~{3}", out), out
    # decoded and without the joiners, the text is the text
    assert seen.replace("\u2060", "") == " ⏎ ".join(text.strip().splitlines())


ISSUE_REFERENCES = [
    "see #123",
    "GH-123",
    "gh-123 and Gh-7 and gH-42",
    "(GH-12), GH-12. GH-12:",
    "fixes owner/repo#123",
    "my-org/my.repo_2#9 and org/repo#45",
    "owner/repo#123 GH-5 #6",
]


def _github_references(seen: str) -> list[str]:
    """What GitHub links as an issue or pull request (and records as a cross-reference) in
    rendered text: ``#12``, ``GH-12`` in any case, ``owner/repo#12``."""
    return re.findall(r"(?i)(?:[\w.-]+/[\w.-]+)?#[0-9]+|\bgh-[0-9]+", seen)


@pytest.mark.parametrize("text", ISSUE_REFERENCES)
def test_inline_makes_every_issue_reference_inert_and_reads_as_written(text: str) -> None:
    from perfgate.text.inert import inline

    assert _github_references(text)  # the case is one
    seen = html.unescape(inline(text))
    assert _github_references(seen) == [], seen
    assert seen.replace("\u2060", "") == text


def test_inline_leaves_a_gh_without_digits_as_written() -> None:
    from perfgate.text.inert import inline

    assert inline("GH-x gh- the-ghost-1") == "GH-x gh- the-ghost-1"


MARKUP_TEXT = st.text(alphabet=st.sampled_from(list("@#/-_.:*`~[]()<>!|$\\&;=+ \nagGhHw0123456789é٣")),
                      max_size=40)


@settings(max_examples=300, deadline=None)
@given(text=MARKUP_TEXT)
def test_inline_leaves_no_markup_reference_or_mention_in_any_text(text: str) -> None:
    from perfgate.text.inert import flatten, inline

    out = inline(text)
    assert "\n" not in out and not RAW_MARKUP & set(out), out
    assert all(out[i - 1].isalnum() and out[i + 1].isalnum() for i, ch in enumerate(out) if ch == "_"), out
    seen = html.unescape(out)
    assert _github_references(seen) == [], seen
    assert not re.search(r"(?:^|\W)@[A-Za-z0-9]", seen) and "://" not in seen and "www." not in seen.lower()
    assert seen.replace("\u2060", "") == flatten(text)  # decoded, the text as the run wrote it


def test_inline_breaks_lines_visibly_and_drops_control_characters() -> None:
    from perfgate.text.inert import inline

    assert inline("a\nb\r\nc\rd\u2028e") == "a ⏎ b ⏎ c ⏎ d ⏎ e"
    assert inline("\x1b[31mred\x1b[0m\x00\x07 \u202eevil\tx ") == "red evil x"
    assert inline("\ud800x") == "\ufffdx"  # a lone surrogate would make writing the report fail


def test_inline_and_code_cap_the_length() -> None:
    from perfgate.text.inert import code, inline

    assert inline("a" * 10, limit=4) == "aaaa… (6 characters cut)"
    long = inline("x" * 5000)
    assert long.startswith("x" * 2000) and long.endswith("… (3000 characters cut)") and len(long) < 2100
    assert code("y" * 5000).endswith("… (3000 characters cut)`")
    assert inline("short") == "short" and inline("") == ""


# --- code -------------------------------------------------------------------------------------


def _code_span_content(span: str) -> str:
    """What CommonMark shows for a text that must be one code span, and nothing else."""
    n = len(span) - len(span.lstrip("`"))
    assert n and len(span) - len(span.rstrip("`")) == n, span
    inner = span[n:-n]
    assert inner and "\n" not in inner
    assert n not in {len(run) for run in re.findall("`+", inner)}, span  # no earlier closing fence
    if len(inner) >= 2 and inner[0] == inner[-1] == " " and inner.strip(" "):
        inner = inner[1:-1]
    return inner


@pytest.mark.parametrize("text", ["plain", "a`b", "`", "``", "```", "`x`", "x ``` y ` z", "` leading", "trailing `",
                                  " both ends ", "   ", " x", "a\\|b", "<img src=x> @org/team ![x](y)",
                                  "$x$ *y* _z_", "ends with a backslash\\"])
def test_code_shows_its_text_literally_whatever_it_holds(text: str) -> None:
    from perfgate.text.inert import code

    assert _code_span_content(code(text)) == text


def test_code_flattens_lines_and_drops_control_characters() -> None:
    from perfgate.text.inert import code, code_cell

    assert code("a\nb\x1b[1m!") == "`a ⏎ b!`"
    assert code("") == "` `"
    assert code_cell("Tesla T4") == "`Tesla T4`"
    assert "|" not in code_cell("a|b `c`")  # a | would split the table cell, even inside a code span


# --- terminal ---------------------------------------------------------------------------------


def test_terminal_removes_escape_sequences_and_control_characters() -> None:
    from perfgate.text.inert import terminal

    assert terminal("\x1b[31mred\x1b[0m \x1b]0;title\x07ok\x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\"
                    "\x00\x07\x08\x7f\x9b2J \u202eevil") == "red oklink evil"
    assert terminal("one\ntwo") == "one ⏎ two"
    assert terminal("plain text: 12.5 ms, resnet_50") == "plain text: 12.5 ms, resnet_50"


def test_the_gate_table_prints_no_escape_sequence() -> None:
    outcome = scenario()
    hostile = tuple(dataclasses.replace(c, reason="\x1b[2J\x1b]0;owned\x07wiped\nPASS") if c.verdict is Verdict.ERROR
                    else c for c in outcome.comparisons)
    text = gate_table(dataclasses.replace(outcome, comparisons=hostile))
    assert "\x1b" not in text and "\x07" not in text
    assert "broken: ERROR — wiped ⏎ PASS" in text
