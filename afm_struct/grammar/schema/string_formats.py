"""What each JSON Schema ``format`` becomes in a grammar, so that ``enforced`` stays exact.

"Exact" is judged against the *format-asserting validator*: jsonschema's validator class for
the schema's draft with that draft's own ``FORMAT_CHECKER`` (:func:`format_checker`), with
the ``jsonschema[format-nongpl]`` extra installed so that uri, uri-reference, uri-template,
iri, date-time, time, duration, hostname, idn-hostname and json-pointer are really checked.
The draft's checker and not the class-wide ``FormatChecker()``: the latter merges every draft
and lets draft 3's ``time`` (``%H:%M:%S``, no offset) override RFC 3339's.

The guarantee: a string the grammar accepts for a format is one that checker accepts (the
grammar may be stricter; each :class:`FormatRule` says so).  Per format, one of:

* ``native``     llguidance's own format regex, measured to accept only valid strings;
* ``pattern``    our regex (``tests/grammar/test_formats.py`` checks it against the checker),
  put in ``pattern`` (or, beside an existing ``pattern``, in an ``allOf`` llguidance
  intersects), with a ``maxLength`` where the format bounds the length;
* ``unsupported`` no regex can be exact (``regex``: nested groups are not regular), or none is
  written yet: the format stays, llguidance rejects it and the ladder downgrades the schema
  with ``unsupported_format:<name>``;
* ``annotation`` the draft's checker does not assert it: dropped (an annotation by the spec).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

# ---------------------------------------------------------------- building blocks (no anchors)

_HEX = "[0-9A-Fa-f]"
_PCT = f"%{_HEX}{{2}}"
# A year that is not 0000 (date.fromisoformat and rfc3339-validator reject year 0).
_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
# Leap years: divisible by 4 and not by 100, or divisible by 400 (0000 excluded).
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = (f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
         "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
         f"|{_LEAP_YEAR}-02-29)")
# RFC 3339 full-time as rfc3339-validator reads it: no leap second 60 (llguidance allows it);
# T and Z in either case (the checker upper-cases first).
_TIME = ("(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"
         "(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_DATE_TIME = f"{_DATE}[tT]{_TIME}"
# Draft 3's ``time`` is ``datetime.strptime(s, "%H:%M:%S")``: no offset, no fraction.
_DRAFT3_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"

# RFC 3986 appendix A, as rfc3986-validator spells it (``{,n}`` written ``{0,n}``: Rust's
# regex syntax needs the lower bound).
_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
_IPV4_IN_URI = f"(?:{_DEC_OCTET}\\.){{3}}{_DEC_OCTET}"
_H16 = f"{_HEX}{{1,4}}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4_IN_URI})"
_IPV6_IN_URI = "(?:" + "|".join((
    f"(?:{_H16}:){{6}}{_LS32}",
    f"::(?:{_H16}:){{5}}{_LS32}",
    f"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    f"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    f"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
)) + ")"
_UNRESERVED_SUB = "a-zA-Z0-9_.~\\-!$&'()*+,;="
_PCHAR = f"(?:[{_UNRESERVED_SUB}:@]|{_PCT})"
_QUERY = f"(?:[{_UNRESERVED_SUB}:@/?]|{_PCT})*"
_TAIL = f"(?:\\?{_QUERY})?(?:#{_QUERY})?"


def _uri_and_reference(ipv6: str) -> tuple[str, str]:
    """RFC 3986's URI and URI-reference with ``ipv6`` as the IPv6address rule."""
    authority = (f"(?:(?:[{_UNRESERVED_SUB}:]|{_PCT})*@)?"
                 f"(?:\\[(?:{ipv6}|v{_HEX}+\\.[{_UNRESERVED_SUB}:]+)\\]"
                 f"|{_IPV4_IN_URI}|(?:[{_UNRESERVED_SUB}]|{_PCT})*)"
                 "(?::[0-9]*)?")
    scheme = "[a-zA-Z][a-zA-Z0-9+.\\-]*:"
    paths = (f"//{authority}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?")
    rootless = f"{_PCHAR}+(?:/{_PCHAR}*)*"
    noscheme = f"(?:[{_UNRESERVED_SUB}@]|{_PCT})+(?:/{_PCHAR}*)*"
    uri = f"{scheme}(?:{paths}|{rootless}|){_TAIL}"
    # URI / relative-ref with the authority written once (twice doubles the compile time):
    # an optional scheme before the shared paths, else scheme + rootless, noscheme or empty.
    reference = f"(?:(?:{scheme})?(?:{paths})|{scheme}(?:{rootless})?|{noscheme}|){_TAIL}"
    return uri, reference


_URI, _URI_REFERENCE = _uri_and_reference(_IPV6_IN_URI)  # _URI: tests compare llguidance's
# rfc3987-syntax (the iri checker) refuses every IPv6 literal with "::" in it (and RFC 3986
# dec-octets with a leading 0 inside one): IRIs get only the 8-group form.
_IRI, _IRI_REFERENCE = _uri_and_reference(f"(?:{_H16}:){{7}}{_H16}")

# RFC 6570 level 4, narrowed to what the ``uri-template`` package accepts: a variable starts
# with ALPHA / DIGIT / "_" (not "%"), a prefix is 1-999 (the package refuses 4 digits), the
# reserved operators ``= , ! @ |`` are left out.  Literals: RFC 6570's ASCII set.
_VARNAME = f"[A-Za-z0-9_](?:\\.?(?:[A-Za-z0-9_]|{_PCT}))*"
_VARSPEC = f"{_VARNAME}(?::[1-9][0-9]{{0,2}}|\\*)?"
_URI_TEMPLATE = (f"(?:[!#$&()*+,\\-./0-9:;=?@A-Z\\[\\]_a-z~]|{_PCT}"
                 f"|\\{{[+#./;?&]?{_VARSPEC}(?:,{_VARSPEC})*\\}})*")

# RFC 6901: "/"-separated tokens, "~" only as "~0" or "~1".
_JSON_POINTER = "(?:/(?:[^~/]|~[01])*)*"
# draft-handrews-relative-json-pointer-01 as jsonschema checks it: its digit loop also refuses
# a "0" followed by a digit anywhere ("100"), so the prefix is "0" or [1-9]+ with one final 0.
_RELATIVE_JSON_POINTER = f"(?:0|[1-9]+0?)(?:#|{_JSON_POINTER})"

# Labels of letters, digits and inner hyphens (RFC 1123), 1-63 characters each.
_LDH_LABEL = "[a-zA-Z0-9](?:[a-zA-Z0-9\\-]{0,61}[a-zA-Z0-9])?"
# IDNA 2008 also refuses "--" at positions 3-4 (xn-- labels are punycode: left out).
_IDNA_ASCII_LABEL = ("(?:[a-zA-Z0-9](?:[a-zA-Z0-9\\-]?[a-zA-Z0-9])?"
                     "|[a-zA-Z0-9][a-zA-Z0-9\\-][a-zA-Z0-9][a-zA-Z0-9\\-]{0,59}[a-zA-Z0-9]"
                     "|[a-zA-Z0-9][a-zA-Z0-9\\-]-[a-zA-Z0-9](?:[a-zA-Z0-9\\-]{0,58}[a-zA-Z0-9])?)")
_IDN_HOSTNAME = f"{_IDNA_ASCII_LABEL}(?:\\.{_IDNA_ASCII_LABEL})*"
_HOSTNAME = f"{_LDH_LABEL}(?:\\.{_LDH_LABEL})*"


@dataclass(frozen=True)
class FormatRule:
    """How one format is enforced.  ``regex`` is unanchored (full-match semantics)."""

    kind: str  # "native" | "pattern" | "unsupported"
    regex: str | None = None
    max_length: int | None = None
    native_as: str | None = None  # enforce as this llguidance format instead (idn-email)
    stricter: str = ""  # what valid strings the grammar refuses, if any

    @property
    def pattern(self) -> str | None:
        """The anchored JSON Schema ``pattern`` (``pattern`` is a search, not a full match)."""
        return None if self.regex is None else f"^{self.regex}$"


_IRI_STRICTER = "ASCII only (no ucschar); IPv6 literals in the 8-group form only"

# Formats in their latest (2019-09 / 2020-12) meaning.  Where llguidance's own regex is
# looser than the checker, ours replaces it (the reason is in the comment).
RULES: dict[str, FormatRule] = {
    # llguidance: any year 0000-9999 with Feb 29 every year, seconds up to 60.
    "date-time": FormatRule("pattern", _DATE_TIME, stricter="years past 9999 are not 4 digits"),
    "date": FormatRule("pattern", _DATE),
    "time": FormatRule("pattern", _TIME),
    "duration": FormatRule("native", stricter="no fractions (P0.5D), no P1Y2W, no PYYYY-MM-DD form"),
    "email": FormatRule("native", stricter="the checker wants only an '@'; this is RFC 5321 ASCII"),
    "idn-email": FormatRule("native", native_as="email", stricter="ASCII addresses only"),
    # llguidance has no total-length bound; fqdn's is 253 (a trailing dot is not counted).
    "hostname": FormatRule("native", max_length=253, stricter="no trailing dot"),
    "idn-hostname": FormatRule("pattern", _IDN_HOSTNAME, max_length=253,
                               stricter="ASCII labels only (no U-labels, no xn-- labels)"),
    "ipv4": FormatRule("native"),
    "ipv6": FormatRule("native", stricter="no embedded IPv4 (::ffff:1.2.3.4)"),
    "uuid": FormatRule("native"),
    # llguidance's RFC 3986 regex: every string it accepts passes rfc3986-validator.
    "uri": FormatRule("native", stricter="no IPv4-embedded IPv6 literals ([::ffff:1.2.3.4])"),
    "uri-reference": FormatRule("pattern", _URI_REFERENCE, stricter="ASCII only"),
    # Every URI is an IRI (RFC 3987 §2.2): the URI grammar is an exact subset.
    "iri": FormatRule("pattern", _IRI, stricter=_IRI_STRICTER),
    "iri-reference": FormatRule("pattern", _IRI_REFERENCE, stricter=_IRI_STRICTER),
    "uri-template": FormatRule("pattern", _URI_TEMPLATE,
                               stricter="RFC 6570 proper: no defaults, no '{,x}', ASCII literals"),
    "json-pointer": FormatRule("pattern", _JSON_POINTER),
    "relative-json-pointer": FormatRule("pattern", _RELATIVE_JSON_POINTER,
                                        stricter="ASCII digits only"),
    # Python's ``re`` syntax nests groups to any depth: not a regular language.
    "regex": FormatRule("unsupported"),
}

# Draft 3 names and meanings (jsonschema's Draft3Validator checks these).
_DRAFT3_RULES: dict[str, FormatRule] = {
    "time": FormatRule("pattern", _DRAFT3_TIME),
    "host-name": FormatRule("native", native_as="hostname", max_length=253),
    "ip-address": FormatRule("native", native_as="ipv4"),
    "color": FormatRule("unsupported"),  # CSS 2.1 names and #rgb: not written (no dev schema)
}


@functools.cache
def _checker_for_draft(draft: int) -> Any:
    import jsonschema

    cls = {3: jsonschema.Draft3Validator, 4: jsonschema.Draft4Validator,
           6: jsonschema.Draft6Validator, 7: jsonschema.Draft7Validator,
           2019: jsonschema.Draft201909Validator}.get(draft, jsonschema.Draft202012Validator)
    return cls.FORMAT_CHECKER


def format_checker(validator_cls: Any) -> Any:
    """The format-asserting checker for a jsonschema validator class: that draft's own."""
    return validator_cls.FORMAT_CHECKER


def asserted(fmt: str, draft: int) -> bool:
    """True when the draft's format checker asserts ``fmt`` (``draft`` 0 = undeclared → 2020-12)."""
    return fmt in _checker_for_draft(draft).checkers


def rule_for(fmt: str, draft: int) -> FormatRule | None:
    """The rule enforcing ``fmt`` in ``draft``; None when the format is an annotation only.

    A format with an exact rule is enforced even where the draft's checker ignores it (a
    draft-4 ``uuid``): stricter than the validator, never looser, and what callers expect.
    """
    rule = _DRAFT3_RULES.get(fmt) if draft == 3 else None
    if rule is None and fmt in RULES and not (draft == 3 and fmt in _DRAFT3_RULES):
        rule = RULES[fmt]
    if rule is None:
        return None
    if rule.kind == "unsupported" and not asserted(fmt, draft):
        return None  # not checked in this draft: an annotation, not a reason to downgrade
    return rule


def drop_annotation_format(node: dict[str, Any], draft: int) -> dict[str, Any] | None:
    """``node`` without a ``format`` that is only an annotation in ``draft``, or None."""
    fmt = node.get("format")
    if not isinstance(fmt, str) or rule_for(fmt, draft) is not None:
        return None
    return {k: v for k, v in node.items() if k != "format"}


def exact_format(node: dict[str, Any], draft: int) -> dict[str, Any] | None:
    """``node`` with its ``format`` made exact for llguidance, or None when already so.

    Unsupported formats stay: llguidance refuses them ("Unknown format") and the ladder turns
    that into ``unsupported_format:<name>`` on the relaxed rung.
    """
    fmt = node.get("format")
    rule = rule_for(fmt, draft) if isinstance(fmt, str) else None
    if rule is None or rule.kind == "unsupported" or (
            rule.kind == "native" and rule.native_as is None and rule.max_length is None):
        return None
    extra: dict[str, Any] = {}
    if rule.kind == "pattern":
        extra["pattern"] = rule.pattern
    if rule.max_length is not None:
        extra["maxLength"] = rule.max_length
    out: dict[str, Any] = {}
    for key, value in node.items():  # same position: llguidance keeps the keyword order
        if key != "format":
            out[key] = value
        elif rule.kind == "native":
            out["format"] = rule.native_as or fmt
    if any(k in out for k in extra):  # both must hold: llguidance intersects an allOf branch
        out["allOf"] = [*out.get("allOf", []), extra]
    else:
        out.update(extra)
    return out
