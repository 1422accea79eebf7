"""Fresh contents keep an input's recorded layout: gaps (a view of a packed projection) and broadcast dims (a
class token expanded over the batch). A generated starter is made for the layout the model passes; the
harness had handed it TensorIterator's dense copy, and the ViT's starters FAILed their smoke check."""

import torch

from autokernel_tui.harness.worker.inputs import perturb, refill_


def _layouts():
    g = torch.Generator().manual_seed(0)
    packed = torch.randn(2, 17, 3, 2, 16, generator=g)[:, :, 0].transpose(1, 2)  # q of a qkv: strided, gaps
    token = torch.randn(1, 1, 32, generator=g).expand(2, 1, 32)  # stride 0 over the batch
    return packed, token


def test_fresh_contents_keep_gaps_and_broadcast_dims():
    packed, token = _layouts()
    assert packed.stride() == (1632, 16, 96, 1) and token.stride() == (0, 32, 1)
    new_packed, new_token = perturb((packed, token), 7, torch.device("cpu"))
    assert new_packed.stride() == packed.stride() and new_token.stride() == token.stride()
    assert not torch.equal(new_packed, packed) and not torch.equal(new_token, token)
    ratio = new_packed / packed  # each element its own factor in [0.5, 1.5)
    assert bool(((ratio >= 0.5) & (ratio < 1.5)).all())
    assert torch.equal(new_token[0], new_token[1])  # still one token for every batch element
    ids = torch.arange(17).expand(2, 17)  # position ids, broadcast: permuted, still broadcast
    (new_ids,) = perturb((ids,), 9, torch.device("cpu"))
    assert new_ids.stride() == ids.stride() and sorted(new_ids[0].tolist()) == list(range(17))


def test_refill_writes_a_broadcast_input_through_the_memory_it_has():
    packed, token = _layouts()
    fresh = perturb((packed, token), 8, torch.device("cpu"))
    ptrs = (packed.data_ptr(), token.data_ptr())
    refill_((packed, token), fresh)
    assert (packed.data_ptr(), token.data_ptr()) == ptrs
    assert torch.equal(packed, fresh[0]) and torch.equal(token, fresh[1])


def test_fresh_contents_keep_an_inputs_offset_into_its_storage():
    """A generated task's inputs sit a little way into their storage, as a model's views do; every rep's fresh
    contents keep that, so a kernel that counts a view's offset from its storage's start fails in any rep."""
    g = torch.Generator().manual_seed(0)
    dense = torch.randn(40, generator=g)[8:].view(4, 8)  # contiguous, at offset 8
    packed = torch.randn(2, 17, 3, 2, 16, generator=g)[:, :, 1].transpose(1, 2)  # k of a qkv: offset 32
    for t in perturb((dense, packed), 3, torch.device("cpu")):
        assert t.storage_offset() in (8, 32) and t.is_contiguous() == (t.shape == dense.shape)
    new_dense, new_packed = perturb((dense, packed), 3, torch.device("cpu"))
    assert (new_dense.storage_offset(), new_dense.stride()) == (8, dense.stride())
    assert (new_packed.storage_offset(), new_packed.stride()) == (32, packed.stride())


def test_a_generated_references_inputs_start_into_their_storage_in_the_recorded_layout():
    from autokernel_tui.profiling.generate import REFERENCE_TEMPLATE

    scope: dict = {}
    start = REFERENCE_TEMPLATE.index("INPUT_OFFSET = ")
    exec("import torch\n_FLOATS = ('float32',)\nUNIT = {'model_dtype': 'float32'}\n"
         "def _dtype(name, dtype):\n    return dtype if name == 'float32' else getattr(torch, name)\n"
         + REFERENCE_TEMPLATE[start:REFERENCE_TEMPLATE.index("def make_inputs", start)], scope)
    g = torch.Generator().manual_seed(0)
    for meta in ({"shape": [4, 8], "stride": [8, 1], "dtype": "float32"},
                 {"shape": [2, 3, 4], "stride": [36, 4, 1], "dtype": "float32"},  # gaps, as a slice of a qkv
                 {"shape": [3, 5], "stride": [5, 1], "dtype": "int64", "min": 0, "max": 9}):
        t = scope["_tensor"](meta, torch.float32, "cpu", g)
        assert t.storage_offset() == scope["INPUT_OFFSET"] > 0 and list(t.stride()) == meta["stride"], meta


def test_a_generated_references_scaled_rep_keeps_each_inputs_layout_and_offset():
    """The adversarial rep (activations scaled by 4) hands the kernel the recorded strides at the same
    storage offset as the first rep, broadcast inputs broadcast again."""
    from autokernel_tui.profiling.generate import REFERENCE_TEMPLATE

    scope: dict = {}
    start = REFERENCE_TEMPLATE.index("def _layout_of(")
    exec("import torch\n" + REFERENCE_TEMPLATE[start:REFERENCE_TEMPLATE.index("def _scaled(", start)], scope)
    qkv = torch.randn(2, 5, 3, 4)
    for like in (torch.randn(40)[16:].view(4, 6),          # dense, 16 into its storage
                 qkv[:, :, 1],                              # k of a packed projection: gaps, offset 4
                 torch.randn(1, 8).expand(3, 8)):               # broadcast over its rows
        out = scope["_layout_of"](like * 4, like)
        assert torch.equal(out, like * 4)
        assert (out.stride(), out.storage_offset()) == (like.stride(), like.storage_offset())
