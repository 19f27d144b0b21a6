"""The screen's C/C++ lexer reads comments, strings, splices and digraphs as the compiler does
(verifier/screen/lexer.py), so no construct desynchronises what the screen sees from what
compiles."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from hipevolve.verifier.screen.cxx import CxxSource
from hipevolve.verifier.screen.lexer import joined_strings, lex


def directives(text: str) -> list[tuple[int, str, str]]:
    return list(CxxSource("kernel.hip", text).directives())


def test_raw_string_holding_a_comment_opener_does_not_hide_the_next_line():
    text = 'auto s = R"(" /*)";\n#include </etc/passwd>\nauto t = "*/";\n'
    assert directives(text) == [(2, "include", "</etc/passwd>")]


def test_lines_inside_a_raw_string_are_not_directives():
    text = 'auto s = R"x(\n#include </etc/passwd>\n)x";\n#define A 1\n'
    assert directives(text) == [(4, "define", "A 1")]


def test_a_splice_joins_a_directive_and_extends_a_line_comment():
    text = "#inc\\\nlude <a.h>\n// note \\\n#include <b.h>\nint x;\n"
    assert directives(text) == [(1, "include", "<a.h>")]
    assert lex(text).code.count("\n") == text.count("\n")


def test_digraph_hash_is_a_directive():
    assert directives("%:include <x.h>\n") == [(1, "include", "<x.h>")]


def test_digit_separators_are_not_character_literals():
    code = lex("int a = 1'000'000; /* c */ int b = 0x1p-3;\n").code
    assert "/*" not in code and "int b" in code


def test_character_literal_holding_a_quote_does_not_start_a_string():
    bare = lex("char q = '\"'; int r = f(1);\n").bare
    assert "int r = f(1);" in bare


def test_bare_blanks_string_contents_and_keeps_offsets():
    lexed = lex('a = "sys(" ; b = u8R"d(x\ny)d"; c;\n')
    assert len(lexed.code) == len(lexed.bare)
    assert "sys" not in lexed.bare and "c;" in lexed.bare
    assert lexed.code.count("\n") == lexed.bare.count("\n") == 2


def test_adjacent_string_literals_are_joined_and_decoded():
    values = [v for _, v in joined_strings(lex('asm(".inc" "b\\x69n");\n'))]
    assert values == [".incbin"]


def test_unterminated_raw_string_is_reported():
    assert lex('auto s = R"x(never closed\n').errors


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 is not installed")
@pytest.mark.parametrize(
    "text",
    [
        'auto s = R"(" /*)";\n#define SEEN 1\nauto t = "*/";\n',
        "#def\\\nine SEEN 1\n",
        "%:define SEEN 1\n",
        "// hidden \\\n#define NOT_SEEN 1\n#define SEEN 1\n",
        "char q = '\"'; /* \" */\n#define SEEN 1\n",
    ],
)
def test_the_lexer_finds_the_directives_clang_finds(text):
    """clang -dM -E lists the macros the preprocessor saw defined: the lexer must agree."""
    proc = subprocess.run(
        ["clang-19", "-x", "c++", "-std=c++17", "-dM", "-E", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    seen_by_clang = {
        line.split()[1]
        for line in proc.stdout.splitlines()
        if line.split()[1] in ("SEEN", "NOT_SEEN")
    }
    seen_by_lexer = {rest.split()[0] for _, d, rest in directives(text) if d == "define"}
    assert seen_by_lexer == seen_by_clang == {"SEEN"}
