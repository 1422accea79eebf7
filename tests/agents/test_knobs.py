from autokernel_tui.agents.knobs import default_values, parse_knobs, rewrite, search_space

SOURCE = '''"""Docstring: BLOCK = 4 here is not a knob."""
import triton

BLOCK_SIZE = 1024  # élément count (non-ASCII comment before nothing)
NUM_WARPS: int = 4
GROUP_M=8   # odd spacing kept
lower_case = 3
FLAG = True
SCALE = 1.5
NEG = -1
TUPLE = (1, 2)
CAP = 7  # unknown name: fixed unless task.toml lists it


def kernel_fn(x):
    NUM_WARPS = 99  # a local, not a knob
    return x
'''


def test_parse_finds_only_module_level_int_constants():
    knobs = parse_knobs(SOURCE)
    assert {k: v.value for k, v in knobs.items()} == {"BLOCK_SIZE": 1024, "NUM_WARPS": 4, "GROUP_M": 8, "CAP": 7}


def test_rewrite_changes_only_the_literals():
    out = rewrite(SOURCE, {"BLOCK_SIZE": 256, "GROUP_M": 16, "NUM_WARPS": 8})
    before, after = SOURCE.splitlines(), out.splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert changed == [
        ("BLOCK_SIZE = 1024  # élément count (non-ASCII comment before nothing)",
         "BLOCK_SIZE = 256  # élément count (non-ASCII comment before nothing)"),
        ("NUM_WARPS: int = 4", "NUM_WARPS: int = 8"),
        ("GROUP_M=8   # odd spacing kept", "GROUP_M=16   # odd spacing kept"),
    ]
    assert rewrite(out, {"BLOCK_SIZE": 1024, "GROUP_M": 8, "NUM_WARPS": 4}) == SOURCE  # byte-for-byte round trip


def test_rewrite_refuses_an_unknown_knob():
    import pytest
    with pytest.raises(KeyError, match="NOPE"):
        rewrite(SOURCE, {"NOPE": 1})


def test_search_space_prefers_the_task_list_and_keeps_the_current_value():
    space = search_space(SOURCE, {"NUM_WARPS": [1, 2, 8], "CAP": [5, 7, 9]})
    assert space["NUM_WARPS"] == (1, 2, 4, 8)  # current value 4 joined the declared list
    assert space["CAP"] == (5, 7, 9)
    assert space["GROUP_M"] == (1, 2, 4, 8, 16)  # name-based default
    assert space["BLOCK_SIZE"] == (128, 256, 512, 1024, 2048, 4096, 8192)
    assert "CAP" not in search_space(SOURCE, {})  # unknown names are not guessed


def test_default_values_by_name():
    assert default_values("NUM_STAGES", 3) == (1, 2, 3, 4, 5)
    assert default_values("BLOCK_N", 100) == (100,)  # not a power of two: left alone
    assert default_values("EPS_SCALE", 4) == (4,)
