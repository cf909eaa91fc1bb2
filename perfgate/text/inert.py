"""Text from a measured run, made inert for the reports that show it.

The markdown report is posted as a pull-request comment and written to the job summary,
and the measured run is the pull request's code: a workload's exception message, its
name, the GPU name, a label's evidence, a baseline's reason or a trace file's name can
be written to do harm. In GitHub-flavoured markdown such text could ping a team
(``@org/team``), load a tracking image (``![x](https://…)``), carry HTML (``<img>``), a
link, math (``$…$``) or, after a newline, a line that looks like the gate's own
(``**Check: passes.**``). Every string that did not come from perfgate's own wording goes
through one of the functions here before it reaches a report:

``inline(text)``
    For running text and table cells. The rules:

    * control characters are removed, ANSI escape sequences whole (not only their
      ``ESC``), and so are the bidirectional controls that make text read differently
      from how it is stored; a lone surrogate (JSON allows ``"\\ud800"``) becomes U+FFFD,
      so writing the report as UTF-8 cannot fail;
    * a line break (LF, CR, NEL, U+2028, U+2029) becomes the visible separator ``" ⏎ "``,
      a tab a space, and the ends are stripped, so the text never starts or ends a line
      of its own;
    * the text is capped at ``limit`` characters, with ``… (N characters cut)``;
    * the characters that make markup are written as HTML character references, which
      GitHub decodes for display and never parses as syntax: ``&`` ``<`` ``>`` (no HTML,
      no autolink in angle brackets, no entity of the text's own), ``[`` ``]`` (no link,
      image, footnote or task box, so ``!`` and ``(`` need nothing), the backtick, ``*``,
      ``~``, ``\\``, ``|`` (no code, emphasis, strikethrough, escape or table cell), ``$`` (no
      math), and ``_`` unless it stands between two letters or digits, where CommonMark
      never reads it as emphasis (``resnet_50`` stays as written);
    * a character reference works the same inside a table cell as outside, where a
      backslash escape of ``|`` does not; that is why references were chosen over
      backslash escapes;
    * ``@`` and ``#`` are followed by a WORD JOINER (U+2060, written ``&#8288;``): GitHub
      finds mentions (``@org/team``) and issue references (``#12``, ``owner/repo#12``) in
      the text after the markdown is rendered, where a character reference is already
      decoded, so only a character between ``@`` or ``#`` and what follows stops them;
      after ``#`` it also stops a heading;
    * the other form of issue reference GitHub links, ``GH-12`` (in any case), gets the
      joiner between ``GH`` and ``-`` where digits follow, which stops it the same way;
    * ``://`` gets the same joiner after its colon and ``www.`` before its dot, so a bare
      address is not made a link; an e-mail address is not either, its ``@`` being broken;
    * at the start of the text, a ``-`` ``+`` or ``=`` followed by a space, the end or
      another of them, and the ``.`` or ``)`` after leading digits followed by a space or
      the end, are written as references, so the text cannot open a list, a setext
      heading or a thematic break when a report puts it at the start of a line (``-5%``
      and ``2.14.1`` stay as written).

    Decoding the references and dropping the joiners gives back the cleaned text, so the
    message reads as the run wrote it.

``code(text)``
    A code span showing ``text`` literally: GitHub processes neither markup, mentions
    nor HTML inside one. The fence is one backtick longer than the longest run of
    backticks inside, padded with a space on each side where CommonMark strips one
    (content that starts or ends with a backtick, or with a space on both ends).
    Control characters and line breaks are handled as by ``inline``, and the length is
    capped the same way.

``code_cell(text)``
    ``code`` for a table cell: GitHub splits a table row at every ``|`` not escaped by a
    backslash, even inside a code span, and a backslash escape cannot show ``\\|``
    literally there; a value holding ``|`` is shown with ``inline`` instead.

``terminal(text)``
    For the terminal: the control characters and ANSI sequences removed (a result file
    must not recolour, move the cursor or retitle the terminal) and the line breaks
    flattened, for one-line fields.

``flatten(text)`` is the cleaning all four share, for a line already shown literally (a
command in an indented code block).
"""

from __future__ import annotations

import re

__all__ = ["code", "code_cell", "flatten", "inline", "terminal"]

LIMIT = 2000
"""Characters of a single string shown at most; the rest is cut with a note."""
SEPARATOR = " ⏎ "
"""What a line break inside a one-line field becomes."""
JOINER = "&#8288;"
"""WORD JOINER: invisible, and no character of a name, so ``@`` and ``#`` before it refer to nothing."""

_ANSI = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]              # CSI: colours, cursor movement, erasing
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?   # OSC: window title, hyperlinks; ends at BEL or ST
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?        # DCS, SOS, PM, APC strings
    | \x1b[ -/]*[0-~]                      # the other escape sequences
    | \x9b[0-?]*[ -/]*[@-~]                # CSI in its 8-bit form
    """,
    re.VERBOSE,
)
_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_DROP = re.compile(
    "[\x00-\x08\x0e-\x1f\x7f-\x9f"  # C0 and C1 controls (tab and line breaks are handled before)
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"  # bidirectional marks, embeddings, overrides, isolates
)
_ESCAPE = {
    "&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "&#91;", "]": "&#93;", "`": "&#96;", "*": "&#42;",
    "~": "&#126;", "\\": "&#92;", "|": "&#124;", "$": "&#36;", "_": "&#95;",
}
_LEADING = {"-": "&#45;", "+": "&#43;", "=": "&#61;"}
_ORDERED = re.compile(r"\d{1,9}[.)](?= |$)")


def _clean(text: object, *, strip: bool = True) -> str:
    """Control characters and ANSI sequences out, line breaks flattened, the ends stripped."""
    s = text if isinstance(text, str) else str(text)
    s = _SURROGATE.sub("\ufffd", s)
    s = _ANSI.sub("", s)
    s = _BREAK.sub(SEPARATOR, s)
    s = s.replace("\t", " ")
    s = _DROP.sub("", s)
    return s.strip() if strip else s


def _cap(s: str, limit: int) -> str:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if len(s) <= limit:
        return s
    return f"{s[:limit].rstrip()}… ({len(s) - limit} characters cut)"


def short_repr(value: object, limit: int = 60) -> str:
    """A value from a file for a one-line message: its ``repr`` (which escapes control
    characters), at most ``limit`` characters, an ellipsis where it was cut."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def flatten(text: object, limit: int = LIMIT) -> str:
    """``text`` on one line: control characters and ANSI sequences removed, line breaks
    shown as ``⏎``, the ends stripped, at most ``limit`` characters (then a note)."""
    return _cap(_clean(text), limit)


def terminal(text: object, limit: int = LIMIT) -> str:
    """``text`` safe to print in a one-line terminal field (see :func:`flatten`)."""
    return flatten(text, limit)


def inline(text: object, limit: int = LIMIT) -> str:
    """``text`` inert in GitHub-flavoured markdown running text and table cells."""
    s = flatten(text, limit)
    out: list[str] = []
    n = len(s)
    for i, ch in enumerate(s):
        if ch == "_" and 0 < i < n - 1 and s[i - 1].isalnum() and s[i + 1].isalnum():
            out.append(ch)  # inside a word: never emphasis
        elif ch in _ESCAPE:
            out.append(_ESCAPE[ch])
        elif ch in "@#":
            out.append(ch + JOINER)
        elif ch == ":" and s.startswith("//", i + 1):
            out.append(ch + JOINER)
        elif ch == "-" and i >= 2 and s[i - 2:i].lower() == "gh" and s[i + 1:i + 2].isdigit():
            out.append(JOINER + ch)  # GH-12: an issue reference
        elif ch == "." and i >= 3 and s[i - 3:i].lower() == "www":
            out.append(JOINER + ch)
        elif i == 0 and ch in _LEADING and (n == 1 or s[1] in " -+="):
            out.append(_LEADING[ch])
        else:
            out.append(ch)
    lead = _ORDERED.match(s)
    if lead:  # "1. x" or "1) x" would open an ordered list at the start of a line
        end = lead.end() - 1
        out[end] = f"&#{ord(s[end])};"
    return "".join(out)


def code(text: object, limit: int = LIMIT) -> str:
    """A code span that shows ``text`` (flattened, capped) literally, backticks included."""
    s = _cap(_clean(text, strip=False), limit)  # spaces at the ends are part of a literal value
    if not s:
        return "` `"
    longest = max((len(run) for run in re.findall("`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = s[0] == "`" or s[-1] == "`" or (s[0] == " " and s[-1] == " " and s.strip(" "))
    return f"{fence} {s} {fence}" if pad else f"{fence}{s}{fence}"


def code_cell(text: object, limit: int = LIMIT) -> str:
    """:func:`code` for a GFM table cell; a value holding ``|`` is shown with :func:`inline`."""
    s = _cap(_clean(text, strip=False), limit)
    if "|" in s:
        return inline(s, max(limit, len(s)))
    return code(s, max(limit, len(s)))
