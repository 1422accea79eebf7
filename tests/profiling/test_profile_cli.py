"""The profile command end to end: table on stdout, ranked JSON on disk."""

import json

from autokernel_tui.cli import main as cli_main


def test_profile_command_prints_the_ranked_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert cli_main(["profile", "bert-tiny", "--device", "cpu", "--steps", "1", "--train", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "CPU self time of aten ops (not GPU time)" in text and "if at floor" in text
    prof = json.loads(out.read_text())
    fams = {f["family"] for f in prof["families"]}
    assert {"attention_bidirectional", "layernorm", "gelu", "matmul", "cross_entropy"} <= fams
    assert "flash_attention" not in fams  # BERT attends both ways: not the causal starter
    gelu = next(f for f in prof["families"] if f["family"] == "gelu")
    assert gelu["shapes"][0]["dims"]["approximate"] == "none"  # BERT's erf GELU
    assert prof["model_args"] == {"batch": 2, "seq": 16, "dtype": "float32", "train": True, "layers": 2,
                                  "device": "cpu"}
    assert [f["rank"] for f in prof["families"]] == list(range(1, len(prof["families"]) + 1))
