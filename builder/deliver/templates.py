"""PR.md and ISSUE.md laid out on the receiving tree's own templates.

The tree's `pull_request_template.md` and its bug issue form (`.github/ISSUE_TEMPLATE/*.yml`) are
read from the pinned commit at export time; nothing of them is kept in our code. Every part that
asks for the submitter's own words becomes a placeholder (upstream's AGENTS.md forbids generated
PR descriptions and issue text); the tool fills only facts that it measured or read.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from builder.errors import InputError

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_COMMENT_ONLY = re.compile(r"^\s*<!--.*-->\s*$")
_INLINE_FIELD = re.compile(r"^(\s*[-*]?\s*)([^<]*?):\s*(<!--.*-->)\s*$")


@cache
def package_conf() -> dict:
    text = resources.files("builder.deliver").joinpath("data/package.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def placeholder(what: str) -> str:
    return package_conf()["placeholder"].format(what=what.replace("]", ")").replace("[", "("))


def placeholder_pattern() -> re.Pattern[str]:
    before, _, after = package_conf()["placeholder"].partition("{what}")
    return re.compile(re.escape(before) + r"[^\]\n]*" + re.escape(after))


@dataclass(frozen=True)
class Section:
    heading: str
    """The heading line as the template writes it ('' for text before the first heading)."""
    title: str
    body: tuple[str, ...]


def parse_markdown_sections(text: str) -> list[Section]:
    sections: list[Section] = []
    heading, title, body = "", "", list[str]()
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else _HEADING.match(line)
        if m:
            sections.append(Section(heading, title, tuple(body)))
            heading, title, body = line, m.group(2), []
        else:
            body.append(line)
    sections.append(Section(heading, title, tuple(body)))
    return [s for s in sections if s.heading or any(x.strip() for x in s.body)]


def _comment_text(line: str) -> str:
    return re.sub(r"\s+", " ", line.strip().removeprefix("<!--").removesuffix("-->")).strip()


def _asks_for_words(s: Section) -> bool:
    """A section whose only content is the template's guidance comment(s): the submitter writes it."""
    lines = [x for x in s.body if x.strip()]
    return bool(lines) and all(_COMMENT_ONLY.match(x) for x in lines)


def render_pr(template: str, facts: str) -> str:
    """The template with a placeholder wherever it asks for words and `facts` in the section the
    data names (or a section of their own before the template's last one)."""
    sections = parse_markdown_sections(template)
    conf = package_conf()["pr"]
    target = next((i for i, s in enumerate(sections)
                   if s.heading and any(w in s.title.lower() for w in conf["fact_sections"])), None)
    out: list[str] = []
    for i, s in enumerate(sections):
        if target is None and i == len(sections) - 1 and s.heading:
            out += [f"## {conf['fact_heading']}", "", facts.rstrip("\n"), ""]
        if s.heading:
            out.append(s.heading)
        asks = _asks_for_words(s)
        body = list(s.body)
        while body and not body[-1].strip():
            body.pop()
        for line in body:
            m = _INLINE_FIELD.match(line)
            if m and m.group(2).strip():
                out.append(f"{line} {placeholder(m.group(2).strip() + ': ' + _comment_text(m.group(3)))}")
            else:
                out.append(line)
        if asks:
            guidance = " ".join(_comment_text(x) for x in body if x.strip())
            out += ["", placeholder(f"{s.title}, in your own words: {guidance}")]
        if i == target:
            out += ["", facts.rstrip("\n")]
        out.append("")
    if target is None and (not sections or not sections[-1].heading):
        out += [f"## {conf['fact_heading']}", "", facts.rstrip("\n"), ""]
    return "\n".join(out).rstrip("\n") + "\n"


# -- the issue form -----------------------------------------------------------------------------
@dataclass(frozen=True)
class IssueForm:
    path: str
    name: str
    title: str
    labels: tuple[str, ...]
    body: tuple[dict, ...]


def load_form(path: str, text: str) -> IssueForm:
    try:
        # the C loader when PyYAML has one: the pure-Python one takes ~0.1 s per form
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not a valid issue form: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("body"), list):
        raise InputError(f"{path}: not an issue form (no body list)")
    labels = data.get("labels") or []
    if isinstance(labels, str):
        labels = [x.strip() for x in labels.split(",")]
    return IssueForm(path, str(data.get("name", "")), str(data.get("title", "")),
                     tuple(str(x) for x in labels), tuple(x for x in data["body"] if isinstance(x, dict)))


def pick_bug_form(forms: list[IssueForm]) -> IssueForm | None:
    """The generic bug form: a form that says "bug"; the one that says "misc" (or the data's other
    words) first, else the first by file name."""
    def says(f: IssueForm, words: list[str]) -> bool:
        hay = " ".join([f.name, f.title, *f.labels]).lower()
        return any(w in hay for w in words)

    bugs = sorted((f for f in forms if says(f, ["bug"])), key=lambda f: f.path)
    if not bugs:
        return None
    generic = [f for f in bugs if says(f, package_conf()["issue"]["generic"])]
    return (generic or bugs)[0]


@dataclass(frozen=True)
class IssueFacts:
    version: str
    reproducer: str
    """Shell commands."""
    output: str
    """The failing output; '' when no evidence holds one."""
    output_missing: str
    """Why there is no output (for the placeholder)."""
    backends: tuple[str, ...]


def _kind(field: dict) -> str:
    conf = package_conf()["issue"]
    fid = str(field.get("id", "")).lower()
    label = str((field.get("attributes") or {}).get("label", "")).lower()
    for kind in ("version", "reproducer", "output", "backends"):
        if any(w == fid or w in label for w in conf[kind]):
            return kind
    return "prose"


def render_issue(form: IssueForm, facts: IssueFacts) -> str:
    """The body GitHub would make from the form: `### label` and the value of each field."""
    out: list[str] = []
    for field in form.body:
        ftype = field.get("type")
        attrs = field.get("attributes") or {}
        if ftype == "markdown" or not attrs.get("label"):
            continue
        label = str(attrs["label"])
        required = bool((field.get("validations") or {}).get("required"))
        kind = _kind(field)
        value: str
        if kind == "version":
            value = facts.version
        elif kind == "reproducer":
            value = f"```{attrs.get('render') or 'shell'}\n{facts.reproducer.rstrip()}\n```"
        elif kind == "output":
            if facts.output:
                value = _into_console(str(attrs.get("value") or ""), facts.output)
            else:
                value = placeholder(f"{label}: {facts.output_missing}")
        elif kind == "backends" and facts.backends:
            value = ", ".join(facts.backends)
        else:
            desc = re.sub(r"\s+", " ", str(attrs.get("description", ""))).strip()
            if ftype == "dropdown":
                desc = (desc + " " if desc else "") + "Options: " + ", ".join(str(o) for o in attrs.get("options", []))
            if ftype == "checkboxes":
                opts = attrs.get("options") or []
                value = "\n".join(f"- [ ] {o.get('label', '')}" for o in opts if isinstance(o, dict))
                if required:
                    value += "\n\n" + placeholder(f"{label}: tick the boxes that are true")
            elif required:
                value = placeholder(f"{label}: {desc}" if desc else label)
            else:
                value = "_No response_" + (f"\n\n<!-- optional: {desc} -->" if desc else "")
        out += [f"### {label}", "", value.rstrip("\n"), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def _into_console(template: str, output: str) -> str:
    """The field's own value template with the output in its console block, else a plain block."""
    m = re.search(r"```console\n\s*\n```", template)
    if m:
        return template[: m.start()] + f"```console\n{output.rstrip()}\n```" + template[m.end():]
    return f"```console\n{output.rstrip()}\n```"
