"""The claim patterns' rules: what is refused (with the rule), what a concrete path matches, when two overlap."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from muster_mesh.claims import PLAIN_PATH, CheckRequest, all_plain
from muster_mesh.patterns import (
    MAX_PATTERN_CHARS,
    first_match,
    matches,
    overlaps,
    path_problem,
    pattern_problem,
)

OVERLAPPING = [
    ("src/store/**", "src/store/a.py"),  # ** at the end
    ("**/a.py", "src/**"),  # ** at either end
    ("**/test_*.py", "src/**"),
    ("*.sql", "migrations/x.sql"),  # no slash: any depth
    ("a*", "*b"),  # "ab" matches both, though neither matches the other's text
    ("src/[ab].py", "src/[!a].py"),  # b.py
    ("docs/", "docs/x/y.md"),  # a directory pattern covers what is under it
    ("src/store", "src/store/x.py"),  # so does an anchored plain name
    ("build/", "build/out/x.o"),  # a directory pattern vs a file in it
    ("**", "x"),
    ("a/?", "a/b"),
    ("src/**/x.py", "src/x.py"),  # ** matches no segment too
    ("src/*/x.py", "src/a/*.py"),
]
DISJOINT = [
    ("*.sql", "*.py"),  # a wildcard name covers the files it matches, not a directory named like them
    ("src/[ab].py", "src/c.py"),
    ("src/[a].py", "src/[!a].py"),
    ("src/a/**", "src/b/**"),
    ("src/*.py", "src/a/b.py"),  # * stays within one segment
    ("src/*.py", "lib/a.py"),
    ("a/?", "a/bc"),
    ("lib/**", "src/a.py"),
    ("README.md", "src/**/*.py"),  # a bare name is a file name at any depth, not a directory
]


@pytest.mark.parametrize(("a", "b"), OVERLAPPING)
def test_overlapping_patterns(a: str, b: str) -> None:
    assert overlaps(a, b) and overlaps(b, a)


@pytest.mark.parametrize(("a", "b"), DISJOINT)
def test_disjoint_patterns(a: str, b: str) -> None:
    assert not overlaps(a, b) and not overlaps(b, a)


@pytest.mark.parametrize(
    ("pattern", "rule"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("/etc/passwd", "absolute"),
        ("!src/**", "negation"),
        ("../x", "parent_reference"),
        ("src/../../x", "parent_reference"),
        ("./src", "not_normalized"),
        ("src//a", "not_normalized"),
        ("src\\a", "forbidden_character"),
        ("a\nb", "forbidden_character"),
        ("x" * (MAX_PATTERN_CHARS + 1), "too_long"),
    ],
)
def test_bad_patterns_are_refused_with_the_rule(pattern: str, rule: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is not None and problem.rule == rule


@pytest.mark.parametrize("pattern", ["src/store/**", "README.md", "*.sql", "docs/", "src/[ab]*.py", "**/x"])
def test_good_patterns_pass(pattern: str) -> None:
    assert pattern_problem(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/a/b.py", False),
        ("*.sql", "db/x.sql", True),
        ("*.sql", "b.sql/x", False),
        ("docs/", "docs/a/b.md", True),
        ("src/store", "src/store/a.py", True),
        ("README.md", "README.md/x", False),
        ("src/store/**", "src/store/x/y", True),
        ("README.md", "README.md", True),
        ("README.md", "README.mdx", False),
        ("build/", "build/x", True),
    ],
)
def test_concrete_paths(pattern: str, path: str, hit: bool) -> None:
    assert matches(pattern, path) is hit


def test_every_overlap_case_has_a_witness_path_or_none() -> None:
    """The overlap rule agrees with the matcher on witnesses: for each overlapping pair, some path named in the
    cases matches both; for each disjoint pair, none of them does."""
    witnesses = [
        "src/store/a.py",
        "src/a.py",
        "src/b.py",
        "migrations/x.sql",
        "ab",
        "docs/x/y.md",
        "build/out/x.o",
        "src/store/x.py",
    ]
    witnesses += ["x", "a/b", "src/x.py", "src/a/x.py", "src/a/b.py", "lib/a.py", "a/bc", "src/c.py", "src/test_a.py"]
    for a, b in DISJOINT:
        assert not [w for w in witnesses if matches(a, w) and matches(b, w)], (a, b)
    for a, b in OVERLAPPING:
        assert [w for w in witnesses if matches(a, w) and matches(b, w)], (a, b)


def test_the_combined_matcher_finds_the_first_pattern_as_matches_does() -> None:
    """``first_match`` answers with one regex per path what trying each pattern with ``matches`` answers, the end
    rule included (a bare name matched through a "directory" of that name falls through to the next pattern)."""
    patterns = (
        "README.md",
        "*.sql",
        "src/store/**",
        "docs/",
        "src/store",
        "**/test_*.py",
        "a/**/b",
        "[ab]c",
        "src/*.py",
        "**",
    )
    paths = [
        "README.md",
        "README.md/x",
        "x/README.md",
        "m/x.sql",
        "x.sql/y",
        "src/store/a.py",
        "src/store",
        "src/app.py",
        "src/a/app.py",
        "docs/x/y.md",
        "tests/test_a.py",
        "a/b",
        "a/q/r/b",
        "bc",
        "z/ac/d",
        "other",
    ]
    for start in range(len(patterns)):
        chosen = patterns[start:]
        matcher = first_match(chosen)
        expected = [next((i for i, p in enumerate(chosen) if matches(p, path)), None) for path in paths]
        assert [matcher.first(path) for path in paths] == expected, chosen
        assert matcher.each(paths) == expected, chosen
    assert first_match(()).first("a") is None
    # The end rule: README.md/x passes the bare name's regex but not the rule, so the catch-all answers.
    assert first_match(("README.md", "**")).first("README.md/x") == 1
    assert first_match(("README.md", "**")).each(["README.md/x", "README.md"]) == [1, 0]


def test_a_plainly_good_path_keeps_every_rule() -> None:
    """Every string of up to four characters from an alphabet of the awkward ones (dots, slashes, a negation, blanks,
    globs, a backslash, a control, non-ASCII): the one-match test of a checked path accepts only what the rules one
    by one accept, and a plain path too."""
    alphabet = ["a", ".", "/", "!", " ", "*", "?", "[", "\\", "\x01", "\x7f", "é", "\u3000"]
    accepted = 0
    for length in range(1, 5):
        for chars in itertools.product(alphabet, repeat=length):
            path = "".join(chars)
            if PLAIN_PATH.fullmatch(path) is not None:
                accepted += 1
                assert path_problem(path) is None and not any(ch in path for ch in "*?["), repr(path)
    assert accepted > 1000
    for plain in ["src/a.py", "a/b/", "...", "x/.hidden", "é/ü.txt", "a b/c"]:
        assert PLAIN_PATH.fullmatch(plain) is not None, plain


def test_a_list_of_plain_paths_is_accepted_at_once_exactly_when_each_path_is() -> None:
    """The whole-list match (``all_plain``: the paths joined by newlines) accepts a list only when ``PLAIN_PATH``
    accepts each of its paths: every string of up to three characters of the awkward alphabet (a newline among
    them), alone, before and after a plain one, and twice."""
    alphabet = ["a", ".", "/", "!", " ", "*", "[", "\\", "\n", "\x7f", "é"]
    for length in range(1, 4):
        for chars in itertools.product(alphabet, repeat=length):
            path = "".join(chars)
            alone = PLAIN_PATH.fullmatch(path) is not None
            for paths in ([path], [path, "src/a.py"], ["src/a.py", path], [path, path]):
                assert all_plain(paths) == alone, paths


def test_a_checked_list_with_one_bad_path_names_it_by_its_place_and_rule() -> None:
    """A list the whole-list match refuses goes through the rules path by path, which locate and name the one broken."""
    with pytest.raises(ValidationError) as refused:
        CheckRequest.model_validate({"repo": "r", "paths": ["src/a.py", "src/../b.py", "c.md"]})
    (error,) = refused.value.errors()
    assert error["loc"] == ("paths", 1) and error["type"] == "parent_reference"
    with pytest.raises(ValidationError) as globbed:
        CheckRequest.model_validate({"repo": "r", "paths": ["src/*.py"]})
    assert [(e["loc"], e["type"]) for e in globbed.value.errors()] == [(("paths", 0), "not_concrete")]
    with pytest.raises(ValidationError) as typed:
        CheckRequest.model_validate({"repo": "r", "paths": ["src/a.py", 3, "x" * (MAX_PATTERN_CHARS + 1)]})
    assert [(e["loc"], e["type"]) for e in typed.value.errors()] == [
        (("paths", 1), "string_type"),
        (("paths", 2), "string_too_long"),
    ]
    plain = ["src/a.py", "b/", "é/ü.txt"]
    assert CheckRequest.model_validate({"repo": "r", "paths": plain}).paths == plain
