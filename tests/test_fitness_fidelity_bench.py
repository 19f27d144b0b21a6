"""bench/fitness_fidelity.py's pure helpers on the CPU: Kendall's tau, and how a variant's work
is named (a mangled symbol's own identifier, cuobjdump's SASS split per function)."""

from __future__ import annotations

import pytest
from bench_module import load_bench

bench = load_bench("fitness_fidelity")


def test_kendall_tau_of_equal_reversed_and_tied_orders():
    assert bench.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert bench.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert bench.kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(2 / 3)
    assert bench.kendall_tau([1, 1], [1, 2]) == 0.0


@pytest.mark.parametrize(
    ("symbol", "name"),
    [
        ("_Z11gdn_tc_prepPKtS0_S0_PKfS2_PtPfS3_S4_iiii", "gdn_tc_prep"),
        ("_Z11gdn_tc_scanILi32ELi3EEvPKtS1_S1_PKfS1_S3_S3_PtPfiiii", "gdn_tc_scan"),
        ("gdn_recurrent_kernel", "gdn_recurrent_kernel"),
    ],
)
def test_a_symbols_own_identifier_is_read_from_its_mangled_name(symbol, name):
    assert bench.base_name(symbol) == name


def test_launched_kernel_names_map_to_the_same_identifiers():
    """The profiler names kernels demangled; the bench keeps the identifier before the template
    arguments or the parameter list, as base_name does for the library's symbols."""
    for demangled, name in [("void gdn_tc_scan<32, 3>(unsigned short const*, int)", "gdn_tc_scan"),
                            ("gdn_tc_prep(unsigned short const*)", "gdn_tc_prep"),
                            ("softmax_kernel", "softmax_kernel")]:  # fmt: skip
        assert bench.launched_name(demangled) == name


LISTING = """
Fatbin elf code:
================
arch = sm_90
\t\tFunction : _Z11gdn_tc_prepPKt
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t\tFunction : _Z11gdn_tc_scanILi32ELi3EEvPKt
        /*0000*/                   MOV R1, c[0x0][0x28] ;
"""


def test_a_sass_listing_splits_into_one_digest_per_function():
    code = bench.sass_by_function(LISTING)
    assert set(code) == {"_Z11gdn_tc_prepPKt", "_Z11gdn_tc_scanILi32ELi3EEvPKt"}
    changed = bench.sass_by_function(LISTING.replace("MOV R1", "MOV R2"))
    assert changed["_Z11gdn_tc_prepPKt"] == code["_Z11gdn_tc_prepPKt"]
    assert changed["_Z11gdn_tc_scanILi32ELi3EEvPKt"] != code["_Z11gdn_tc_scanILi32ELi3EEvPKt"]
